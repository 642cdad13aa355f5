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
)

// joinedStore is the real store, counting the system and credential reads by kind.
type joinedStore struct {
	store.Store
	joined, separate atomic.Int64
}

func (j *joinedStore) GetSystemCredential(ctx context.Context, owner, id string) (*store.System, *store.Credential, error) {
	j.joined.Add(1)
	return j.Store.GetSystemCredential(ctx, owner, id)
}

func (j *joinedStore) GetSystem(ctx context.Context, owner, id string) (*store.System, error) {
	j.separate.Add(1)
	return j.Store.GetSystem(ctx, owner, id)
}

func (j *joinedStore) GetCredential(ctx context.Context, owner, id string) (*store.Credential, error) {
	j.separate.Add(1)
	return j.Store.GetCredential(ctx, owner, id)
}

// putKey seals a fresh ed25519 key as alice's credential for hpc.
func putKey(t *testing.T, s store.Store, kr *secret.Keyring) {
	t.Helper()
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
	if err := s.PutCredential(t.Context(), &store.Credential{Owner: "alice", SystemID: "hpc", Username: "alice", KeyType: "ssh-ed25519",
		PublicKeyFingerprint: ssh.FingerprintSHA256(signer.PublicKey()), Sealed: sealed}); err != nil {
		t.Fatal(err)
	}
}

// TestResolveSeesEveryCommittedChange: a decision is made from what the store holds when it is
// asked, with one read of the system and its credential together: a change committed between
// two requests — by this instance or straight in the store, as another instance would — is
// obeyed by the second request. Keeping the decrypted signer must never let a deleted or
// replaced credential, a deleted system or a revoked grant keep working.
func TestResolveSeesEveryCommittedChange(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	kr, err := secret.NewKeyring("k1", map[string][]byte{"k1": key})
	if err != nil {
		t.Fatal(err)
	}
	owner := Request{Caller: auth.Principal{User: "alice"}, System: "hpc", Level: Command}
	grantee := Request{Caller: auth.Principal{User: "bob"}, System: "alice:hpc", Level: Read, Paths: []string{"/shared/x"}}
	tests := []struct {
		name   string
		req    Request
		change func(t *testing.T, s store.Store, r *Resolver, g *store.Grant)
		want   error // nil: allowed, with the credential now stored
	}{
		{"credential deleted", owner, func(t *testing.T, s store.Store, _ *Resolver, _ *store.Grant) {
			if err := s.DeleteCredential(t.Context(), "alice", "hpc"); err != nil {
				t.Fatal(err)
			}
		}, ErrUnusable},
		{"credential replaced", owner, func(t *testing.T, s store.Store, _ *Resolver, _ *store.Grant) {
			putKey(t, s, kr)
		}, nil},
		{"system deleted", owner, func(t *testing.T, s store.Store, _ *Resolver, _ *store.Grant) {
			if err := s.DeleteSystem(t.Context(), "alice", "hpc"); err != nil {
				t.Fatal(err)
			}
		}, store.ErrNotFound},
		{"system disabled", owner, func(t *testing.T, _ store.Store, r *Resolver, _ *store.Grant) {
			if err := r.SetDisabled(t.Context(), &store.DisabledParams{Owner: "alice", SystemID: "hpc", Disabled: true}); err != nil {
				t.Fatal(err)
			}
		}, ErrDisabled},
		{"grant revoked", grantee, func(t *testing.T, s store.Store, _ *Resolver, g *store.Grant) {
			if err := s.DeleteGrant(t.Context(), &store.GrantDeleteParams{Owner: "alice", SystemID: "hpc", ID: g.ID}); err != nil {
				t.Fatal(err)
			}
		}, store.ErrNotFound},
		{"grantee: credential deleted", grantee, func(t *testing.T, s store.Store, _ *Resolver, _ *store.Grant) {
			if err := s.DeleteCredential(t.Context(), "alice", "hpc"); err != nil {
				t.Fatal(err)
			}
		}, ErrUnusable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			base := newStore(t)
			g := sharedSystem(t, base, kr)
			js := &joinedStore{Store: base}
			r := New(Config{}, Deps{Store: js, Keyring: kr})
			r.Remember(ctx, tt.req.Caller)
			first, err := r.Resolve(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Resolve(ctx, tt.req); err != nil { // the signer is kept now
				t.Fatal(err)
			}
			if n, m := js.joined.Load(), js.separate.Load(); n != 2 || m != 0 {
				t.Fatalf("two decisions read the system and credential %d times joined and %d separately, want 2 and 0", n, m)
			}
			tt.change(t, base, r, g)
			d, err := r.Resolve(ctx, tt.req)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("after %s: %v, want %v", tt.name, err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cred, err := base.GetCredential(ctx, "alice", "hpc")
			if err != nil {
				t.Fatal(err)
			}
			if d.Target.Key == first.Target.Key {
				t.Fatalf("pool key unchanged after %s: %+v", tt.name, d.Target.Key)
			}
			if got := d.Target.Key.Credential; got[:len(cred.PublicKeyFingerprint)] != cred.PublicKeyFingerprint {
				t.Fatalf("target uses credential %s, the store holds %s", got, cred.PublicKeyFingerprint)
			}
		})
	}
}
