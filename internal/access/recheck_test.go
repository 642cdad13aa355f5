package access

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/transfer"
)

// countingStore is the real store, counting the reads an access decision makes.
type countingStore struct {
	store.Store
	reads atomic.Int64
}

func (c *countingStore) GetSystem(ctx context.Context, owner, id string) (*store.System, error) {
	c.reads.Add(1)
	return c.Store.GetSystem(ctx, owner, id)
}

func (c *countingStore) GetCredential(ctx context.Context, owner, id string) (*store.Credential, error) {
	c.reads.Add(1)
	return c.Store.GetCredential(ctx, owner, id)
}

func (c *countingStore) GetSystemCredential(ctx context.Context, owner, id string) (*store.System, *store.Credential, error) {
	c.reads.Add(1)
	return c.Store.GetSystemCredential(ctx, owner, id)
}

func (c *countingStore) ListGrants(ctx context.Context, p *store.GrantListParams) ([]store.Grant, error) {
	c.reads.Add(1)
	return c.Store.ListGrants(ctx, p)
}

func (c *countingStore) IsDisabled(ctx context.Context, p *store.DisabledParams) (bool, error) {
	c.reads.Add(1)
	return c.Store.IsDisabled(ctx, p)
}

func (c *countingStore) GetUserGroups(ctx context.Context, p *store.UserGroupsParams) ([]string, error) {
	c.reads.Add(1)
	return c.Store.GetUserGroups(ctx, p)
}

func (c *countingStore) AccessStamp(ctx context.Context, p *store.AccessStampParams) (store.AccessStamp, error) {
	c.reads.Add(1)
	return c.Store.AccessStamp(ctx, p)
}

// sharedSystem makes alice's system hpc with a real sealed credential and a read grant to bob
// on /shared, and returns the grant.
func sharedSystem(t *testing.T, s store.Store, kr *secret.Keyring) *store.Grant {
	t.Helper()
	ctx := t.Context()
	if err := s.CreateSystem(ctx, &store.System{Owner: "alice", ID: "hpc", Host: "127.0.0.1", Port: 22, TrustOnFirstUse: true}); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := kr.Seal(pem.EncodeToMemory(block), CredentialAAD("alice", "hpc", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := ssh.NewSignerFromKey(priv)
	if err := s.PutCredential(ctx, &store.Credential{Owner: "alice", SystemID: "hpc", Username: "alice", KeyType: "ssh-ed25519",
		PublicKeyFingerprint: ssh.FingerprintSHA256(signer.PublicKey()), Sealed: sealed}); err != nil {
		t.Fatal(err)
	}
	g := &store.Grant{Owner: "alice", SystemID: "hpc", Principal: "user:bob", Path: "/shared", Access: "read"}
	if err := s.CreateGrant(ctx, &store.GrantCreateParams{Grant: g}); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestRecheckIsOneQuery: a running transfer's per-range check costs one store read (the access
// stamp) once its decision is cached, where a full decision costs several; a revoked grant or a
// disabled system is still refused at the very next check, on this resolver or another one
// sharing the store (another instance).
func TestRecheckIsOneQuery(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	kr, err := secret.NewKeyring("k1", map[string][]byte{"k1": key})
	if err != nil {
		t.Fatal(err)
	}
	for _, revoke := range []string{"grant revoked", "system disabled", "owner's own, system disabled"} {
		t.Run(revoke, func(t *testing.T) {
			ctx := t.Context()
			base := newStore(t)
			g := sharedSystem(t, base, kr)
			cs := &countingStore{Store: base}
			r := New(Config{}, Deps{Store: cs, Keyring: kr})
			other := New(Config{}, Deps{Store: base, Keyring: kr}) // another instance
			caller, ref := "bob", "alice:hpc"
			if revoke == "owner's own, system disabled" {
				caller, ref = "alice", "hpc"
			}
			r.Remember(ctx, auth.Principal{User: caller})
			sys, err := r.ResolveEndpoint(ctx, caller, transfer.Endpoint{System: ref, Path: "/shared/data"}, false)
			if err != nil {
				t.Fatal(err)
			}
			before := cs.reads.Load()
			if _, err := r.decideTransfer(ctx, Request{Caller: auth.Principal{User: caller}, System: ref, Level: Read, Paths: []string{"/shared/data"}}, true); err != nil {
				t.Fatal(err)
			}
			full := cs.reads.Load() - before
			before = cs.reads.Load()
			cold := New(Config{}, Deps{Store: cs, Keyring: kr}) // switches not cached yet, as every DisabledCacheTTL
			cold.Remember(ctx, auth.Principal{User: caller})
			if _, err := cold.decideTransfer(ctx, Request{Caller: auth.Principal{User: caller}, System: ref, Level: Read, Paths: []string{"/shared/data"}}, true); err != nil {
				t.Fatal(err)
			}
			fullCold := cs.reads.Load() - before
			for range 2 { // the first checks decide in full and cache
				if err := sys.Recheck(ctx); err != nil {
					t.Fatal(err)
				}
			}
			const ranges = 20
			before = cs.reads.Load()
			for range ranges {
				if err := sys.Recheck(ctx); err != nil {
					t.Fatal(err)
				}
			}
			per := float64(cs.reads.Load()-before) / ranges
			t.Logf("store reads: full decision %d (%d with the operator's switches not cached), per range once cached %.1f", full, fullCold, per)
			if per != 1 {
				t.Fatalf("%.1f store reads per range, want 1", per)
			}
			switch revoke {
			case "grant revoked":
				err = other.deps.Store.DeleteGrant(ctx, &store.GrantDeleteParams{Owner: "alice", SystemID: "hpc", ID: g.ID})
			default:
				err = other.SetDisabled(ctx, &store.DisabledParams{Owner: "alice", SystemID: "hpc", Disabled: true})
			}
			if err != nil {
				t.Fatal(err)
			}
			// Switched through another instance: r's own cache of the switches still says
			// enabled, but the stamp does not, so the very next check refuses.
			if err := sys.Recheck(ctx); !errors.Is(err, transfer.ErrSystem) {
				t.Fatalf("check after %s: %v, want ErrSystem", revoke, err)
			} else {
				t.Logf("refused at the next check: %v", err)
			}
		})
	}
}
