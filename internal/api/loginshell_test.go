package api

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestGrantPathsStayWordsUnderFish: alice's remote account logs in with fish, and bob holds a
// write grant on one of her directories. He uploads a file whose name ends a fish single-quoted
// word early (\' is an escape inside fish's single quotes) and then asks for operations that run
// a command with that path. Nothing but the operation may run, as alice, outside his grant.
func TestGrantPathsStayWordsUnderFish(t *testing.T) {
	e := newEnv(t)
	e.srv = sshtest.New(t, sshtest.Options{User: "sshapi-fish", Shell: "/usr/bin/fish"})
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	pwned := filepath.Join(e.srv.Home, "pwned-by-bob")
	t.Cleanup(func() { _ = os.Remove(pwned) })
	if r := e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "user:bob", "path": dir, "access": "write"}); r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	// A file name holds no slash: the command's working directory is alice's home.
	name := `x\';touch ` + filepath.Base(pwned) + `;#`
	at := strings.TrimPrefix(dir, "/") + "/" + url.PathEscape(name)
	if r := e.do("bob", "PUT", "/v1/systems/alice:hpc/content/"+at, "hello\n"); r.status/100 != 2 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ op, want string }{
		{"checksum", "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"}, // sha256 of "hello\n"
		{"filetype", "text"},
	} {
		r := e.do("bob", "GET", "/v1/systems/alice:hpc/"+c.op+"/"+at, nil)
		if _, err := os.Stat(pwned); err == nil {
			t.Fatalf("%s ran bob's command as alice (%d %s)", c.op, r.status, r.body)
		}
		if r.status != 200 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s: %d %s (want 200 with %s)", c.op, r.status, r.body, c.want)
		}
	}
}
