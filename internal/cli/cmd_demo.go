package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/service"
	"github.com/sshapi/sshapi/internal/slurmtest"
	"github.com/sshapi/sshapi/internal/sshtest"
)

type demoOptions struct {
	addr     string
	keep     bool
	infoFile string
	dataDir  string
	user     string
	envFile  string
	slurm    bool
}

func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a throwaway local sshd and sshapi, register the sshd as system \"demo\" and run a command through the API (needs root for the sshd test user)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&o.addr, "addr", "127.0.0.1:0", "HTTP listen address for the demo service")
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep running after the demo command so you can try the API (Ctrl-C stops)")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "", "data directory for the demo service (kept afterwards; default a temporary one that is removed)")
	cmd.Flags().StringVar(&o.infoFile, "info-file", "", "with --keep, write the URL, token, system and the sshd's address, user, host key and private key as JSON to this file (0600) once ready, for test fixtures")
	cmd.Flags().StringVar(&o.user, "user", sshtest.DefaultUser, "local account the demo sshd logs in (created if missing)")
	cmd.Flags().StringVar(&o.envFile, "env-file", "", "once the demo is set up, write SSHAPI_URL, SSHAPI_TOKEN, SSHAPI_SYSTEM, SSHAPI_DATA_DIR (for `sshapi token`), SSHAPI_SSH_USER, SSHAPI_SSH_HOME, SSHAPI_SSH_HOST, SSHAPI_SSH_PORT, SSHAPI_SSH_HOST_KEY and SSHAPI_SSH_KEY_FILE to this file (shell syntax), for scripts")
	cmd.Flags().BoolVar(&o.slurm, "slurm", false, "also start a one-node Slurm cluster (Debian's munge, slurmctld, slurmd) for the jobs routes")
	return cmd
}

func runDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	srv, err := sshtest.Start(ctx, sshtest.Options{User: o.user})
	if err != nil {
		return fmt.Errorf("start demo sshd: %w", err)
	}
	defer srv.Close()
	dataDir := o.dataDir
	if dataDir == "" {
		if dataDir, err = os.MkdirTemp("", "sshapi-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dataDir)
	}
	cfg := config.Default()
	cfg.DataDir, cfg.Addr, cfg.LogLevel = dataDir, o.addr, "warn"
	if o.slurm {
		cl, err := slurmtest.Start(ctx, slurmtest.Options{})
		if err != nil {
			return fmt.Errorf("start demo Slurm cluster: %w", err)
		}
		defer cl.Close()
		cfg.Jobs.Scheduler.Env = map[string]string{"SLURM_CONF": cl.Conf}
	}
	svc, err := service.New(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	}()
	sec, err := service.TokenSecret(cfg)
	if err != nil {
		return err
	}
	tok, err := auth.IssueHS256(sec, "demo-user", 12*time.Hour, time.Now())
	if err != nil {
		return err
	}
	base := "http://" + svc.Addr()
	call := func(method, path string, body any) (string, error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			return "", fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, out)
		}
		return string(out), nil
	}
	fmt.Fprintf(stdout, "local sshd on %s (user %s), sshapi on %s\n\n", srv.Addr, srv.User, base)
	steps := []struct {
		what, method, path string
		body               any
	}{
		{"register the sshd as system \"demo\"", "POST", "/v1/systems", map[string]any{"id": "demo", "host": srv.Host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}}},
		{"store the credential (encrypted; only metadata comes back)", "PUT", "/v1/systems/demo/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)}},
		{"run a command", "POST", "/v1/systems/demo/commands", map[string]any{"command": "uname -a; uptime"}},
	}
	for _, s := range steps {
		out, err := call(s.method, s.path, s.body)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "# %s\n%s %s\n%s\n", s.what, s.method, s.path, out)
	}
	if o.envFile != "" {
		if err := writeDemoEnv(o.envFile, dataDir, base, tok, srv); err != nil {
			return err
		}
	}
	if !o.keep {
		return nil
	}
	if o.infoFile != "" {
		if err := writeDemoInfo(o.infoFile, base, tok, srv); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "Try it:\n  export SSHAPI_URL=%s SSHAPI_TOKEN=%s\n  curl -s -X POST $SSHAPI_URL/v1/systems/demo/commands -H \"Authorization: Bearer $SSHAPI_TOKEN\" -d '{\"command\":\"ls -la\"}'\nCtrl-C stops.\n", base, tok)
	<-ctx.Done()
	return nil
}

// writeDemoInfo writes what a test fixture needs to use the kept demo, atomically (a reader that
// sees the file sees all of it).
func writeDemoInfo(name, url, token string, srv *sshtest.Server) error {
	b, err := json.Marshal(map[string]any{
		"url": url, "token": token, "system": "demo",
		"ssh": map[string]any{"host": srv.Host, "port": srv.Port, "user": srv.User, "home": srv.Home,
			"host_key": srv.AuthorizedHostKey(), "private_key": string(srv.PrivateKeyPEM)},
	})
	if err != nil {
		return err
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write demo info: %w", err)
	}
	return os.Rename(tmp, name)
}

// writeDemoEnv writes what a script needs to drive the demo (URL, token, the sshd's account and
// an authorized key) as shell assignments. The file is owner-only: it holds a token and the path
// of a private key. It is written to a temporary name and renamed, so a reader polling for it
// never sees half of it.
func writeDemoEnv(path, dataDir, base, tok string, srv *sshtest.Server) error {
	keyFile := filepath.Join(dataDir, "demo_client_key")
	if err := os.WriteFile(keyFile, srv.PrivateKeyPEM, 0o600); err != nil {
		return fmt.Errorf("write demo client key: %w", err)
	}
	vars := [][2]string{
		{"SSHAPI_URL", base}, {"SSHAPI_TOKEN", tok}, {"SSHAPI_SYSTEM", "demo"}, {"SSHAPI_DATA_DIR", dataDir},
		{"SSHAPI_SSH_USER", srv.User}, {"SSHAPI_SSH_HOME", srv.Home},
		{"SSHAPI_SSH_HOST", srv.Host}, {"SSHAPI_SSH_PORT", strconv.Itoa(srv.Port)},
		{"SSHAPI_SSH_HOST_KEY", srv.AuthorizedHostKey()}, {"SSHAPI_SSH_KEY_FILE", keyFile},
	}
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "%s='%s'\n", v[0], strings.ReplaceAll(v[1], "'", `'\''`))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write env file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write env file: %w", err)
	}
	return nil
}
