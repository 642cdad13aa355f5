package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/client"
)

// login is what `sshapi login` saves: the service and the token the client verbs use.
type login struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// loginFile is where the login is kept: <user config dir>/sshapi/login.json ($XDG_CONFIG_HOME
// or ~/.config on Linux).
func loginFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the user config dir: %w", err)
	}
	return filepath.Join(dir, "sshapi", "login.json"), nil
}

// loadLogin returns the saved login with SSHAPI_URL and SSHAPI_TOKEN taking precedence.
func loadLogin() (login, error) {
	var l login
	if name, err := loginFile(); err == nil {
		if b, err := os.ReadFile(name); err == nil {
			if err := json.Unmarshal(b, &l); err != nil {
				return l, fmt.Errorf("read %s: %w", name, err)
			}
		}
	}
	if v := os.Getenv("SSHAPI_URL"); v != "" {
		l.URL = v
	}
	if v := os.Getenv("SSHAPI_TOKEN"); v != "" {
		l.Token = v
	}
	if l.URL == "" || l.Token == "" {
		return l, errors.New("not logged in: run `sshapi login --url URL --token TOKEN` or set SSHAPI_URL and SSHAPI_TOKEN")
	}
	return l, nil
}

// apiClient is the client of the logged-in service.
func apiClient() (*client.Client, error) {
	l, err := loadLogin()
	if err != nil {
		return nil, err
	}
	return client.New(l.URL, l.Token), nil
}

// saveLogin writes the login readable by the user only (0600 in a 0700 directory), atomically.
func saveLogin(l login) (string, error) {
	name, err := loginFile()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return "", err
	}
	b, _ := json.MarshalIndent(l, "", "  ")
	tmp, err := os.CreateTemp(filepath.Dir(name), ".login-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return name, os.Rename(tmp.Name(), name)
}

func newLoginCmd() *cobra.Command {
	var l login
	cmd := &cobra.Command{
		Use:   "login --url URL [--token TOKEN]",
		Short: "Save the service URL and your token for the client commands (token read from stdin when not given)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if l.URL == "" {
				return errors.New("--url is required")
			}
			if l.Token == "" {
				fmt.Fprint(cmd.ErrOrStderr(), "token: ")
				tok, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				l.Token = strings.TrimSpace(tok)
			}
			if l.Token == "" {
				return errors.New("no token given")
			}
			l.URL = strings.TrimRight(l.URL, "/")
			systems, err := client.New(l.URL, l.Token).Systems(cmd.Context())
			if err != nil {
				return fmt.Errorf("check the login: %w", err)
			}
			name, err := saveLogin(l)
			if err != nil {
				return fmt.Errorf("save the login: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s (%d systems); saved in %s\n", l.URL, len(systems), name)
			return nil
		},
	}
	cmd.Flags().StringVar(&l.URL, "url", "", "service URL, e.g. https://sshapi.example.org")
	cmd.Flags().StringVar(&l.Token, "token", "", "bearer token (read from stdin when omitted)")
	return cmd
}
