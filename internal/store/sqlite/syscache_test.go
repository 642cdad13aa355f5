package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/store"
)

// TestSystemCredentialSeesEveryWriter warms one store's GetSystemCredential cache and then
// changes the system or its credential through another store on the same file (another
// process) or through plain SQL: the first store's next lookup sees every change. With the
// triggers dropped, a plain UPDATE is not seen until the generation moves, which shows the
// answers came from the cache.
func TestSystemCredentialSeesEveryWriter(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "db")
	a, b := open(t, path), open(t, path)
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	exec := func(q string) {
		t.Helper()
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	newSys := func(host string) *store.System {
		return &store.System{Owner: "alice", ID: "hpc", Host: host, Port: 22, TrustOnFirstUse: true, MaxSessions: 10}
	}
	cred := func(user string) *store.Credential {
		return &store.Credential{Owner: "alice", SystemID: "hpc", Username: user, KeyType: "ssh-ed25519",
			Sealed: secret.Sealed{KeyID: "k1", WrappedKey: []byte("w"), Ciphertext: []byte("c-" + user)}}
	}
	if err := a.CreateSystem(ctx, newSys("h1")); err != nil {
		t.Fatal(err)
	}
	if err := a.PutCredential(ctx, cred("u1")); err != nil {
		t.Fatal(err)
	}
	look := func() (*store.System, *store.Credential) {
		t.Helper()
		s, c, err := a.GetSystemCredential(ctx, "alice", "hpc")
		if err != nil {
			t.Fatal(err)
		}
		return s, c
	}
	look() // warm
	for _, tc := range []struct {
		name  string
		write func()
		check func(*store.System, *store.Credential) bool
	}{
		{"system updated by another store", func() {
			s := newSys("h2")
			if err := b.UpdateSystem(ctx, s); err != nil {
				t.Fatal(err)
			}
		}, func(s *store.System, _ *store.Credential) bool { return s.Host == "h2" }},
		{"host key pinned by another store", func() {
			if _, _, err := b.PinHostKey(ctx, "alice", "hpc", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"); err != nil {
				t.Fatal(err)
			}
		}, func(s *store.System, _ *store.Credential) bool { return len(s.HostKeys) == 1 && !s.TrustOnFirstUse }},
		{"credential replaced by another store", func() {
			if err := b.PutCredential(ctx, cred("u2")); err != nil {
				t.Fatal(err)
			}
		}, func(_ *store.System, c *store.Credential) bool {
			return c != nil && c.Username == "u2" && string(c.Sealed.Ciphertext) == "c-u2"
		}},
		{"credential deleted by another store", func() {
			if err := b.DeleteCredential(ctx, "alice", "hpc"); err != nil {
				t.Fatal(err)
			}
		}, func(_ *store.System, c *store.Credential) bool { return c == nil }},
		{"system deleted and created again by another store", func() {
			if err := b.DeleteSystem(ctx, "alice", "hpc"); err != nil {
				t.Fatal(err)
			}
			if err := b.CreateSystem(ctx, newSys("h3")); err != nil {
				t.Fatal(err)
			}
			if err := b.PutCredential(ctx, cred("u3")); err != nil {
				t.Fatal(err)
			}
		}, func(s *store.System, c *store.Credential) bool {
			return s.Host == "h3" && c != nil && c.Username == "u3"
		}},
		{"system changed by SQL", func() { exec(`UPDATE systems SET description = 'by sql'`) },
			func(s *store.System, _ *store.Credential) bool { return s.Description == "by sql" }},
		{"credential changed by SQL", func() { exec(`UPDATE credentials SET username = 'sqluser'`) },
			func(_ *store.System, c *store.Credential) bool { return c != nil && c.Username == "sqluser" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			look() // the entry is in the cache before the write
			tc.write()
			if s, c := look(); !tc.check(s, c) {
				t.Errorf("after the write GetSystemCredential returned %+v, %+v", s, c)
			}
		})
	}

	t.Run("answers come from the cache", func(t *testing.T) {
		look()
		exec(`DROP TRIGGER systems_generation_update`)
		exec(`UPDATE systems SET description = 'unseen'`)
		if s, _ := look(); s.Description == "unseen" {
			t.Fatal("the lookup read the row although the generation did not move")
		}
		exec(`UPDATE counters SET value = value + 1 WHERE name = 'system_generation'`)
		if s, _ := look(); s.Description != "unseen" {
			t.Errorf("after the generation moved the lookup returned description %q", s.Description)
		}
	})
}
