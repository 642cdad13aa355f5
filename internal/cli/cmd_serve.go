package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/service"
)

type serveOptions struct {
	globalOptions
	printToken      string
	tlsCert, tlsKey string
	behindProxy     bool
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API (embedded SQLite and generated secrets by default)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, o)
		},
	}
	o.addFlags(cmd, true)
	cmd.Flags().StringVar(&o.printToken, "print-token", "", "print a 12-hour dev token and a curl quickstart for this user at start-up")
	cmd.Flags().StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate chain, reloaded when it changes (SSHAPI_TLS_CERT_FILE)")
	cmd.Flags().StringVar(&o.tlsKey, "tls-key", "", "PEM private key for --tls-cert (SSHAPI_TLS_KEY_FILE)")
	cmd.Flags().BoolVar(&o.behindProxy, "behind-proxy", false, "allow plain HTTP on a non-loopback address: a TLS-terminating proxy is in front (SSHAPI_SERVER_BEHIND_PROXY)")
	return cmd
}

func runServe(cmd *cobra.Command, o serveOptions) error {
	cfg, err := o.load(func(c *config.Config) {
		if o.tlsCert != "" || o.tlsKey != "" {
			c.TLS.CertFile, c.TLS.KeyFile = o.tlsCert, o.tlsKey
		}
		if o.behindProxy {
			c.Server.BehindProxy = true
		}
	})
	if err != nil {
		return err
	}
	log := newLogger(cfg, cmd.ErrOrStderr())
	svc, err := service.New(cmd.Context(), cfg, log)
	if err != nil {
		return err
	}
	if o.printToken != "" {
		sec, err := service.TokenSecret(cfg)
		if err != nil {
			return err
		}
		tok, err := auth.IssueHS256(sec, o.printToken, 12*time.Hour, time.Now())
		if err != nil {
			return err
		}
		scheme := "http"
		if cfg.TLS.Enabled() {
			scheme = "https"
		}
		fmt.Fprintf(cmd.OutOrStdout(), quickstart, o.printToken, tok, scheme, cfg.Addr)
		if web := svc.UI(); web != nil {
			base := scheme + "://" + cfg.Addr
			fmt.Fprintf(cmd.OutOrStdout(), "Web interface: %s/ui/\n", base)
			if cfg.UI.Issuer == "" { // the development setup: a single-use link instead of a provider
				link, err := web.CreateLoginLink(cmd.Context(), o.printToken)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "One-time login link for %q (valid %v, works once):\n\n  %s%s\n\n", o.printToken, cfg.UI.WithDefaults().LoginLinkTTL, base, link)
			}
		}
	}
	return svc.Run(cmd.Context())
}

const quickstart = `
sshapi dev token for user %q (valid 12 h):

  export SSHAPI_TOKEN=%s
  export SSHAPI_URL=%s://%s

Quickstart (any SSH server you can log in to; a local one works):

  # 1. register a system with its host keys, as ssh-keyscan prints them
  ssh-keyscan 127.0.0.1 2>/dev/null | jq -Rs '{id:"local", host:"127.0.0.1", port:22, host_keys:[.]}' | \
    curl -s -X POST $SSHAPI_URL/v1/systems -H "Authorization: Bearer $SSHAPI_TOKEN" -d @-
  # 2. store your credential for it (encrypted at rest, never returned)
  jq -n --arg u "$USER" --rawfile k ~/.ssh/id_ed25519 '{username:$u, private_key:$k}' | \
    curl -s -X PUT $SSHAPI_URL/v1/systems/local/credential -H "Authorization: Bearer $SSHAPI_TOKEN" -d @-
  # 3. run a command
  curl -s -X POST $SSHAPI_URL/v1/systems/local/commands -H "Authorization: Bearer $SSHAPI_TOKEN" -d '{"command":"uptime"}'

API document: $SSHAPI_URL/openapi.json   Metrics: $SSHAPI_URL/metrics

`
