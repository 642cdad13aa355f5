package access

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/store"
)

// testKeyring is a keyring with one fresh key.
func testKeyring(t *testing.T) *secret.Keyring {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	kr, err := secret.NewKeyring("k1", map[string][]byte{"k1": key})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// addSystem registers owner's system id with its credential: an SSH system with a fresh
// ed25519 key, or (gw not nil) an S3 system on gw's bucket with gw's keys.
func addSystem(t *testing.T, s store.Store, kr *secret.Keyring, owner, id string, gw *s3test.Server, bucket string) {
	t.Helper()
	ctx := t.Context()
	if gw != nil {
		if err := s.CreateSystem(ctx, &store.System{Owner: owner, ID: id, Kind: store.KindS3, Endpoint: gw.Endpoint, Region: "us-east-1",
			Bucket: bucket, PathStyle: true}); err != nil {
			t.Fatal(err)
		}
		plain, err := SealS3Keys(S3Keys{AccessKeyID: gw.AccessKeyID, SecretAccessKey: gw.SecretAccessKey})
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := kr.Seal(plain, CredentialAAD(owner, id, gw.AccessKeyID))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutCredential(ctx, &store.Credential{Owner: owner, SystemID: id, Username: gw.AccessKeyID, KeyType: store.CredentialS3, Sealed: sealed}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := s.CreateSystem(ctx, &store.System{Owner: owner, ID: id, Host: "127.0.0.1", Port: 22, TrustOnFirstUse: true}); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := kr.Seal(pem.EncodeToMemory(block), CredentialAAD(owner, id, owner))
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := ssh.NewSignerFromKey(priv)
	if err := s.PutCredential(ctx, &store.Credential{Owner: owner, SystemID: id, Username: owner, KeyType: "ssh-ed25519",
		PublicKeyFingerprint: ssh.FingerprintSHA256(signer.PublicKey()), Sealed: sealed}); err != nil {
		t.Fatal(err)
	}
}

// use resolves owner's system id as its owner and, for an S3 system, stats its root (one real
// request); it returns what identifies the kept work: the SSH client config or the backend.
func use(t *testing.T, r *Resolver, owner, id string) any {
	t.Helper()
	d, err := r.Resolve(t.Context(), Request{Caller: auth.Principal{User: owner}, System: id, Level: Read})
	if err != nil {
		t.Fatalf("resolve %s's %s: %v", owner, id, err)
	}
	if d.Storage == nil {
		return d.Target.Config
	}
	if _, err := d.Storage.Stat(t.Context(), "/"); err != nil {
		t.Fatalf("stat %s's %s: %v", owner, id, err)
	}
	return d.Storage
}

// TestCredentialCacheBounded: an owner creating, using and deleting system after system leaves
// the resolver holding a bounded number of parsed credentials: none when the deletions go
// through this instance (Forget, as the API calls it), at most its share when they happen on
// another instance (straight in the store), and none once the idle sweep has run. Another
// owner's kept credential survives the churn (the next request reuses the same parsed work)
// whether the churning owner hits its share or the cache's capacity.
func TestCredentialCacheBounded(t *testing.T) {
	kr := testKeyring(t)
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	const cycles = 40
	tests := []struct {
		name            string
		s3              bool
		capacity, share int
		here            bool // deleted through this instance
		wantMallory     int  // the most mallory may have kept after the churn
	}{
		{"ssh, deleted elsewhere, over the owner's share", false, 64, 3, false, 3},
		{"ssh, deleted elsewhere, over the capacity", false, 4, 4, false, 3},
		{"ssh, deleted here", false, 64, 3, true, 0},
		{"s3, deleted elsewhere, over the owner's share", true, 64, 3, false, 3},
		{"s3, deleted elsewhere, over the capacity", true, 4, 4, false, 3},
		{"s3, deleted here", true, 64, 3, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			var sgw *s3test.Server
			if tt.s3 {
				sgw = gw
			}
			r := New(Config{CredentialCache: tt.capacity, CredentialCachePerOwner: tt.share}, Deps{Store: s, Keyring: kr})
			addSystem(t, s, kr, "bob", "hpc", sgw, bucket)
			bobs := use(t, r, "bob", "hpc")
			for i := range cycles {
				id := fmt.Sprintf("s%d", i)
				addSystem(t, s, kr, "mallory", id, sgw, bucket)
				use(t, r, "mallory", id)
				use(t, r, "mallory", id)
				if err := s.DeleteSystem(t.Context(), "mallory", id); err != nil {
					t.Fatal(err)
				}
				if tt.here {
					r.Forget("mallory", id)
				}
				if all, m := r.derived.size("mallory"); all > tt.capacity || m > tt.share {
					t.Fatalf("after %d systems: %d kept, %d of them mallory's; capacity %d, share %d", i+1, all, m, tt.capacity, tt.share)
				}
			}
			if _, m := r.derived.size("mallory"); m > tt.wantMallory {
				t.Errorf("mallory's deleted systems left %d parsed credentials, want at most %d", m, tt.wantMallory)
			}
			if _, b := r.derived.size("bob"); b != 1 {
				t.Fatalf("bob's credential is no longer kept (%d) after mallory's churn", b)
			}
			cutoff := time.Now()
			if again := use(t, r, "bob", "hpc"); again != bobs {
				t.Error("bob's next request parsed his credential again")
			}
			r.derived.sweep(cutoff) // what Start's sweep does after CredentialCacheIdle
			if all, b := r.derived.size("bob"); all != 1 || b != 1 {
				t.Errorf("after the idle sweep: %d kept, %d of them bob's; want bob's alone", all, b)
			}
		})
	}
}

// TestIdleSweepRuns: between Start and Stop the resolver drops kept credentials once they have
// been idle for Config.CredentialCacheIdle (sweeping at least once a second).
func TestIdleSweepRuns(t *testing.T) {
	kr := testKeyring(t)
	s := newStore(t)
	r := New(Config{CredentialCacheIdle: time.Millisecond, AuditRetention: -1}, Deps{Store: s, Keyring: kr})
	addSystem(t, s, kr, "bob", "hpc", nil, "")
	use(t, r, "bob", "hpc")
	if all, _ := r.derived.size("bob"); all != 1 {
		t.Fatalf("%d kept after a request, want 1", all)
	}
	r.Start(t.Context())
	defer r.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, _ := r.derived.size("bob")
		if all == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d still kept 10s after they went idle", all)
		}
		time.Sleep(20 * time.Millisecond) // polling for the sweep, which runs once a second
	}
}
