package access

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/sqlite"
)

func newStore(t *testing.T) store.Store {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		ref, owner, id string
		bad            bool
	}{
		{"hpc", "me", "hpc", false},
		{"alice:hpc", "alice", "hpc", false},
		{"a%3Ab:hpc", "a:b", "hpc", false}, // owner URL-encoded, split at the last colon
		{"x%40lab.org:hpc", "x@lab.org", "hpc", false},
		{":hpc", "", "", true},
		{"alice:", "", "", true},
		{"%zz:hpc", "", "", true},
	}
	for _, tt := range tests {
		owner, id, err := ParseRef("me", tt.ref)
		if (err != nil) != tt.bad || owner != tt.owner || id != tt.id {
			t.Errorf("ParseRef(%q) = %q, %q, %v", tt.ref, owner, id, err)
		}
		if err != nil {
			continue
		}
		if o2, i2, _ := ParseRef("me", Ref("me", owner, id)); o2 != owner || i2 != id {
			t.Errorf("Ref does not round-trip %q", tt.ref)
		}
	}
}

// TestGrantDecisions: which grant allows what, judged before any connection is made.
func TestGrantDecisions(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	if err := s.CreateSystem(ctx, &store.System{Owner: "alice", ID: "hpc", Host: "h", Port: 22}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []store.Grant{
		{Principal: "user:bob", Path: "/p/shared", Access: "read"},
		{Principal: "group:lab", Path: "/p/lab", Access: "write"},
		{Principal: "authenticated", Path: "/pub", Access: "read"},
		{Principal: "user:old", Path: "/p", Access: "write", ExpiresAt: time.Now().Add(-time.Second)},
	} {
		g.Owner, g.SystemID = "alice", "hpc"
		if err := s.CreateGrant(ctx, &store.GrantCreateParams{Grant: &g}); err != nil {
			t.Fatal(err)
		}
	}
	r := New(Config{}, Deps{Store: s})
	tests := []struct {
		name   string
		caller auth.Principal
		level  Level
		paths  []string
		want   error // nil: a grant allows it (the connection itself is not attempted here)
	}{
		{"read inside", auth.Principal{User: "bob"}, Read, []string{"/p/shared/x"}, nil},
		{"write with read", auth.Principal{User: "bob"}, Write, []string{"/p/shared/x"}, ErrDenied},
		{"dotdot", auth.Principal{User: "bob"}, Read, []string{"/p/shared/../secret"}, ErrDenied},
		{"relative", auth.Principal{User: "bob"}, Read, []string{"."}, ErrDenied},
		{"command", auth.Principal{User: "bob"}, Command, nil, ErrDenied},
		{"group write", auth.Principal{User: "x", Groups: []string{"lab"}}, Write, []string{"/p/lab/a", "/p/lab/b"}, nil},
		{"two grants, one request", auth.Principal{User: "bob", Groups: []string{"lab"}}, Read, []string{"/p/lab/a", "/p/shared/b"}, ErrDenied},
		{"public", auth.Principal{User: "anyone"}, Read, []string{"/pub"}, nil},
		{"expired (only the public grant is left)", auth.Principal{User: "old"}, Read, []string{"/p/x"}, ErrDenied},
		{"expired, on the public path", auth.Principal{User: "old"}, Read, []string{"/pub/x"}, nil},
		{"stranger on a public system outside", auth.Principal{User: "anyone"}, Read, []string{"/p"}, ErrDenied},
	}
	for _, tt := range tests {
		_, err := r.grantFor(ctx, tt.caller, "alice", "hpc", tt.level, tt.paths)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestLinkTokens: only the hash is stored; a wrong secret, an unknown id and a malformed token
// are all "not found".
func TestLinkTokens(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	_ = s.CreateSystem(ctx, &store.System{Owner: "alice", ID: "hpc", Host: "h", Port: 22})
	r := New(Config{}, Deps{Store: s})
	l, token, err := r.NewLink(ctx, "alice", "hpc", "/data/f", Read, time.Now().Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.SplitN(token, ".", 2)[1]
	if LinkID(token) != l.ID || len(secret) < 40 || strings.Contains(string(l.SecretHash), secret) {
		t.Fatalf("token %q for link %+v", token, l)
	}
	stored, _ := s.GetLink(ctx, &store.LinkGetParams{ID: l.ID})
	if strings.Contains(string(stored.SecretHash), secret) {
		t.Fatal("the secret is stored")
	}
	for _, bad := range []string{l.ID + ".wrong", "l_nope." + secret, secret, ""} {
		if _, err := r.ResolveLink(ctx, bad, Read); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("token %q: %v, want not found", bad, err)
		}
	}
	if got, _ := s.GetLink(ctx, &store.LinkGetParams{ID: l.ID}); got.Uses != 0 {
		t.Errorf("refused tokens counted %d uses", got.Uses)
	}
}

func TestAuditRetention(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	now := time.Now()
	for _, age := range []time.Duration{100 * 24 * time.Hour, 91 * 24 * time.Hour, time.Hour} {
		_ = s.AppendAudit(ctx, store.AuditEntry{Time: now.Add(-age), Owner: "alice", Action: "x"})
	}
	if n := New(Config{AuditRetention: -1}, Deps{Store: s}).PurgeAudit(ctx, now); n != 0 {
		t.Fatalf("negative retention purged %d", n)
	}
	if n := New(Config{}, Deps{Store: s}).PurgeAudit(ctx, now); n != 2 {
		t.Fatalf("default (90 days) purged %d, want 2", n)
	}
}

// TestExpiredGrantHides: with only an expired grant the system is not visible at all.
func TestExpiredGrantHides(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	_ = s.CreateSystem(ctx, &store.System{Owner: "alice", ID: "hpc", Host: "h", Port: 22})
	_ = s.CreateGrant(ctx, &store.GrantCreateParams{Grant: &store.Grant{Owner: "alice", SystemID: "hpc", Principal: "user:old",
		Path: "/p", Access: "write", ExpiresAt: time.Now().Add(-time.Second)}})
	_, err := New(Config{}, Deps{Store: s}).grantFor(ctx, auth.Principal{User: "old"}, "alice", "hpc", Read, []string{"/p/x"})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired grant: %v, want not found", err)
	}
}

// TestGroupsForTransfers: a user's groups, as their last token carried them, reach a transfer
// judged by another instance (another Resolver on the same store).
func TestGroupsForTransfers(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	New(Config{}, Deps{Store: s}).Remember(ctx, auth.Principal{User: "dave", Groups: []string{"proj42"}})
	other := New(Config{}, Deps{Store: s})
	p, err := other.principal(ctx, "dave")
	if err != nil || len(p.Groups) != 1 || p.Groups[0] != "proj42" {
		t.Fatalf("groups on another instance: %+v, %v", p, err)
	}
	other.Remember(ctx, auth.Principal{User: "dave"}) // left the group
	if p, _ := New(Config{}, Deps{Store: s}).principal(ctx, "dave"); len(p.Groups) != 0 {
		t.Fatalf("stale groups: %+v", p)
	}
}
