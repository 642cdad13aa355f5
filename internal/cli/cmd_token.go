package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/service"
)

// errDevSecretOff refuses to issue tokens the configured service would not accept.
var errDevSecretOff = errors.New("the configuration does not accept data-dir HS256 tokens (auth.jwks_url is set without auth.enable_dev_secret, or auth.disable_dev_secret is set)")

type tokenOptions struct {
	globalOptions
	user string
	ttl  time.Duration
}

func newTokenCmd() *cobra.Command {
	var o tokenOptions
	cmd := &cobra.Command{
		Use:   "token --user NAME",
		Short: "Print a bearer JWT (HS256, signed with the data dir's secret) for development and admin use",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.user == "" {
				return errors.New("--user is required")
			}
			if o.ttl <= 0 {
				return errors.New("--ttl must be positive: tokens always expire")
			}
			cfg, err := o.load()
			if err != nil {
				return err
			}
			if !cfg.Auth.DevSecretEnabled() {
				return errDevSecretOff
			}
			sec, err := service.TokenSecret(cfg)
			if err != nil {
				return err
			}
			tok, err := auth.IssueHS256(sec, o.user, o.ttl, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVar(&o.user, "user", "", "user name (the token's sub claim)")
	cmd.Flags().DurationVar(&o.ttl, "ttl", time.Hour, "lifetime of the token")
	return cmd
}
