package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/service"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// verbEnv is a real service with a real sshd registered as system "hpc", logged in through
// SSHAPI_URL/SSHAPI_TOKEN.
type verbEnv struct {
	url, token string
	srv        *sshtest.Server
	remote     string // a fresh remote directory (absolute)
}

func startVerbEnv(t *testing.T) *verbEnv {
	t.Helper()
	srv := sshtest.New(t, sshtest.Options{})
	cfg := config.Default()
	cfg.DataDir, cfg.Addr, cfg.LogLevel = t.TempDir(), "127.0.0.1:0", "error"
	ctx := t.Context()
	svc, err := service.New(ctx, cfg, newLogger(cfg, os.Stderr))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	sec, err := service.DevSecret(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.IssueHS256(sec, "cli-user", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := &verbEnv{url: "http://" + svc.Addr(), token: tok, srv: srv, remote: srv.MkTemp(t)}
	for _, s := range []string{"hpc", "hpc2"} {
		e.call(t, "POST", "/v1/systems", map[string]any{"id": s, "host": srv.Host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}})
		e.call(t, "PUT", "/v1/systems/"+s+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)})
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("SSHAPI_URL", e.url)
	t.Setenv("SSHAPI_TOKEN", e.token)
	return e
}

func (e *verbEnv) call(t *testing.T, method, path string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), method, e.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
}

// sshapi runs the CLI in-process and returns its exit code, stdout and stderr.
func sshapi(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := sshapi(t, args...)
	if code != 0 {
		t.Fatalf("sshapi %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func TestClientVerbs(t *testing.T) {
	e := startVerbEnv(t)
	r := "hpc:" + e.remote
	local := t.TempDir()
	data := make([]byte, 3<<20+11)
	_, _ = rand.Read(data)
	src := filepath.Join(local, "big.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}

	if out := mustRun(t, "systems"); !strings.Contains(out, "hpc ") || !strings.Contains(out, "hpc2") {
		t.Errorf("systems:\n%s", out)
	}
	mustRun(t, "mkdir", "-p", r+"/a/b")
	mustRun(t, "put", src, r+"/a/")                                   // into a directory by its trailing slash
	mustRun(t, "put", "-q", src, r+"/a/b")                            // into an existing directory
	_, _, errOut := sshapi(t, "put", "--progress", src, r+"/a/c.bin") // progress bar forced
	if !strings.Contains(errOut, "100%") || !regexp.MustCompile(`[0-9.]+ [kMGT]?B/s`).MatchString(errOut) {
		t.Errorf("put --progress drew no bar with rate: %q", errOut)
	}
	_, _, errOut = sshapi(t, "put", "--resumable", "--progress", src, r+"/a/b/tus.bin") // through the tus endpoint
	if !strings.Contains(errOut, "100%") {
		t.Errorf("put --resumable drew no bar: %q", errOut)
	}
	mustRun(t, "put", "-q", "--no-verify", src, r+"/a/b/nv.bin") // the server is asked for no digest
	for _, p := range []string{"a/big.bin", "a/b/big.bin", "a/c.bin", "a/b/tus.bin", "a/b/nv.bin"} {
		got, err := os.ReadFile(filepath.Join(e.remote, p))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("remote %s: %v (%d bytes)", p, err, len(got))
		}
	}
	if out := mustRun(t, "ls", r+"/a"); out != "b/\nbig.bin\nc.bin\n" {
		t.Errorf("ls:\n%s", out)
	}
	if out := mustRun(t, "ls", "-l", "-R", r); !strings.Contains(out, "a/b/big.bin") || !strings.Contains(out, " 3145739 ") || !strings.Contains(out, "d 0") {
		t.Errorf("ls -lR:\n%s", out)
	}
	if out := mustRun(t, "stat", r+"/a/c.bin"); !strings.Contains(out, "type: file") || !strings.Contains(out, "size: 3145739") {
		t.Errorf("stat:\n%s", out)
	}
	dst := filepath.Join(local, "back.bin")
	mustRun(t, "get", r+"/a/c.bin", dst)
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Error("get: content differs")
	}
	mustRun(t, "get", r+"/a/c.bin", local+"/") // into a directory
	if got, _ := os.ReadFile(filepath.Join(local, "c.bin")); !bytes.Equal(got, data) {
		t.Error("get into a directory: content differs")
	}
	if err := os.WriteFile(filepath.Join(e.remote, "t.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, "cat", r+"/t.txt"); out != "hello\n" {
		t.Errorf("cat: %q", out)
	}
	mustRun(t, "mv", r+"/t.txt", r+"/u.txt")
	mustRun(t, "cp", "-r", r+"/a", r+"/a2")
	if _, err := os.Stat(filepath.Join(e.remote, "a2/b/big.bin")); err != nil {
		t.Errorf("cp -r: %v", err)
	}
	if code, _, errOut := sshapi(t, "rm", r+"/a2"); code != 1 || !strings.Contains(errOut, "409") {
		t.Errorf("rm of a non-empty directory: exit %d %s", code, errOut)
	}
	mustRun(t, "rm", "-r", r+"/a2", r+"/u.txt")
	if _, err := os.Stat(filepath.Join(e.remote, "a2")); !os.IsNotExist(err) {
		t.Errorf("rm -r left %v", err)
	}
	if code, _, errOut := sshapi(t, "stat", r+"/nope"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("stat of a missing path: exit %d %s", code, errOut)
	}
	if code, _, errOut := sshapi(t, "mv", r+"/a", "hpc2:"+e.remote+"/x"); code != 1 || !strings.Contains(errOut, "sshapi transfer") {
		t.Errorf("mv across systems: exit %d %s", code, errOut)
	}
}

func TestRunVerb(t *testing.T) {
	startVerbEnv(t)
	tests := []struct {
		args             []string
		code             int
		stdout, inStderr string
	}{
		{[]string{"run", "hpc", "--", "echo", "out;", "echo", "err", ">&2"}, 0, "out\n", "err\n"},
		{[]string{"run", "hpc", "--", "exit 3"}, 3, "", ""},
		{[]string{"run", "--timeout", "1s", "hpc", "--", "sleep 30"}, 124, "", "timed out"},
		{[]string{"run", "nosuch", "--", "true"}, 1, "", "404"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := sshapi(t, tc.args...)
			if code != tc.code || out != tc.stdout || !strings.Contains(errOut, tc.inStderr) {
				t.Errorf("exit %d stdout %q stderr %q; want %d %q %q", code, out, errOut, tc.code, tc.stdout, tc.inStderr)
			}
		})
	}
}

func TestTransferVerbs(t *testing.T) {
	e := startVerbEnv(t)
	data := make([]byte, 5<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(filepath.Join(e.remote, "src.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, errOut := sshapi(t, "transfer", "--wait", "--progress", "hpc:"+e.remote+"/src.bin", "hpc2:"+e.remote+"/dst.bin")
	if !strings.Contains(errOut, "100%") {
		t.Errorf("transfer --wait drew no finished bar: %q", errOut)
	}
	if got, err := os.ReadFile(filepath.Join(e.remote, "dst.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("transfer result: %v", err)
	}
	id := strings.TrimSpace(mustRun(t, "transfer", "hpc:"+e.remote+"/src.bin", "hpc2:"+e.remote+"/dst2.bin"))
	if !strings.HasPrefix(id, "tr-") {
		t.Fatalf("transfer printed %q", id)
	}
	if out := mustRun(t, "transfers"); !strings.Contains(out, id) {
		t.Errorf("transfers does not list %s:\n%s", id, out)
	}
	if out := mustRun(t, "cancel", id); !strings.HasPrefix(out, id+" ") {
		t.Errorf("cancel: %q", out)
	}
	if code, _, errOut := sshapi(t, "transfer", "--wait", "hpc:"+e.remote+"/missing", "hpc2:"+e.remote+"/x"); code != 1 || !strings.Contains(errOut, "failed") {
		t.Errorf("failed transfer: exit %d %s", code, errOut)
	}
}

func TestLogin(t *testing.T) {
	e := startVerbEnv(t)
	t.Setenv("SSHAPI_URL", "")
	t.Setenv("SSHAPI_TOKEN", "")
	if code, _, errOut := sshapi(t, "systems"); code != 1 || !strings.Contains(errOut, "not logged in") {
		t.Fatalf("systems before login: exit %d %s", code, errOut)
	}
	if code, _, errOut := sshapi(t, "login", "--url", e.url, "--token", "garbage"); code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("login with a bad token: exit %d %s", code, errOut)
	}
	mustRun(t, "login", "--url", e.url+"/", "--token", e.token)
	name := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "sshapi", "login.json")
	st, err := os.Stat(name)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("login file: %v %v", st, err)
	}
	if out := mustRun(t, "systems"); !strings.Contains(out, "hpc") {
		t.Errorf("systems after login:\n%s", out)
	}
	t.Setenv("SSHAPI_TOKEN", "garbage") // the environment overrides the saved login
	if code, _, errOut := sshapi(t, "systems"); code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("SSHAPI_TOKEN did not override: exit %d %s", code, errOut)
	}
}

func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if out := mustRun(t, "completion", sh); !strings.Contains(out, "sshapi") {
			t.Errorf("completion %s: %.100q", sh, out)
		}
	}
}
