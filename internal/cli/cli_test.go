package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/service"
)

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		check    func(t *testing.T, out string)
	}{
		{"version", []string{"version"}, 0, func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "sshapi ") {
				t.Errorf("version output %q", out)
			}
		}},
		{"token verifies with the data dir secret", []string{"token", "--user", "alice", "--data-dir", dir, "--ttl", "5m"}, 0, func(t *testing.T, out string) {
			sec, err := service.DevSecret(dir)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := auth.NewHS256Verifier(sec)
			p, err := v.Verify(t.Context(), strings.TrimSpace(out))
			if err != nil || p.User != "alice" {
				t.Errorf("token %q: %v %v", out, p, err)
			}
		}},
		{"token carries groups for group grants", []string{"token", "--user", "bob", "--group", "proj42", "--group", "lab", "--data-dir", dir}, 0, func(t *testing.T, out string) {
			sec, err := service.DevSecret(dir)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := auth.NewHS256Verifier(sec)
			p, err := v.Verify(t.Context(), strings.TrimSpace(out))
			if err != nil || p.User != "bob" || strings.Join(p.Groups, ",") != "proj42,lab" {
				t.Errorf("token %q: %+v %v", out, p, err)
			}
		}},
		{"token needs a user", []string{"token", "--data-dir", dir}, 1, nil},
		{"token must expire", []string{"token", "--user", "a", "--data-dir", dir, "--ttl", "0s"}, 1, nil},
		{"unknown command", []string{"frobnicate"}, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(t.Context(), tc.args, &out, &errOut); code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.wantCode, errOut.String())
			}
			if tc.check != nil {
				tc.check(t, out.String())
			}
		})
	}
}

// TestDemo runs `sshapi demo`: a throwaway sshd registered through the API and a command run.
func TestDemo(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"demo"}, &out, &errOut); code != 0 {
		t.Fatalf("demo failed: %s\n%s", errOut.String(), out.String())
	}
	if !strings.Contains(out.String(), `"exit_status":0`) || !strings.Contains(out.String(), "load average") {
		t.Fatalf("demo output:\n%s", out.String())
	}
}
