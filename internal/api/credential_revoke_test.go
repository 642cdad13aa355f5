package api

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// TestCredentialChangeReachesEveryInstance: a credential deleted or replaced through one
// instance is obeyed by the very next request on another instance sharing the database, though
// that instance holds pooled connections logged in with the old key and its resolver keeps the
// old key parsed. Deleted: commands and file operations are refused (409, naming the missing
// credential) instead of running on the old connections. Replaced by a key the server refuses:
// they fail to log in (502) rather than ride the old key's connections. Restored: they work.
func TestCredentialChangeReachesEveryInstance(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	ctx := t.Context()

	// A second instance: its own pool and resolver, the same database and keyring.
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, nil))
	pool := sshpool.New(sshpool.Config{}, log, nil)
	_ = pool.Start(ctx)
	t.Cleanup(func() { _ = pool.Stop(context.Background()) })
	res := access.New(access.Config{}, access.Deps{Store: e.api.deps.Store, Keyring: e.api.deps.Keyring, Log: log})
	res.Start(ctx)
	t.Cleanup(res.Stop)
	b := New(Config{}, Deps{Store: e.api.deps.Store, Keyring: e.api.deps.Keyring, Pool: pool, Access: res, Verifier: e.api.deps.Verifier, Log: log})
	hs := httptest.NewServer(b.Handler())
	t.Cleanup(hs.Close)
	other := &env{t: t, url: hs.URL, secret: e.secret, seen: &syncBuffer{}, srv: e.srv, api: b}

	ls := "/v1/systems/hpc/ls/" + strings.TrimPrefix(e.srv.MkTemp(t), "/")
	run := map[string]any{"command": "true"}
	expect := func(when string, status int, title string) {
		t.Helper()
		for _, in := range []*env{other, e} {
			for _, r := range []resp{in.do("alice", "POST", "/v1/systems/hpc/commands", run), in.do("alice", "GET", ls, nil)} {
				if r.status != status {
					t.Fatalf("%s: %d %s, want %d", when, r.status, r.body, status)
				}
				if title != "" && r.json(t)["title"] != title {
					t.Fatalf("%s: %s, want title %q", when, r.body, title)
				}
			}
		}
	}

	expect("with the credential", 200, "")
	if pool.Stats().Conns == 0 {
		t.Fatal("the second instance pooled no connection")
	}

	if r := e.do("alice", "DELETE", "/v1/systems/hpc/credential", nil); r.status != 204 {
		t.Fatalf("delete credential: %d %s", r.status, r.body)
	}
	expect("credential deleted", 409, "")

	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "")
	if r := e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": e.srv.User, "private_key": string(pem.EncodeToMemory(block))}); r.status != 200 {
		t.Fatalf("put a refused key: %d %s", r.status, r.body)
	}
	expect("credential replaced by a refused key", 502, "SSH authentication failed")

	if r := e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)}); r.status != 200 {
		t.Fatalf("put the key back: %d %s", r.status, r.body)
	}
	expect("credential restored", 200, "")
}
