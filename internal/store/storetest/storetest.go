// Package storetest is the contract suite every store.Store driver must
// pass. A driver's test calls Run with a function that opens a fresh, empty
// store; the suite uses only the store.Store interface, so the same tests
// run unchanged on SQLite and PostgreSQL.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/store"
)

// Run runs the contract suite. newStore must return a fresh, empty store for
// each call and arrange for it to be closed (for example with t.Cleanup).
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, s store.Store)
	}{
		{"CreateGetSystem", testCreateGetSystem},
		{"CreateConflict", testCreateConflict},
		{"InvalidKeys", testInvalidKeys},
		{"ListSystems", testListSystems},
		{"UpdateSystem", testUpdateSystem},
		{"UpdateSystemConditional", testUpdateSystemConditional},
		{"PinHostKey", testPinHostKey},
		{"PinHostKeyConcurrent", testPinHostKeyConcurrent},
		{"JumpAndAlgorithms", testJumpAndAlgorithms},
		{"S3System", testS3System},
		{"DeleteSystem", testDeleteSystem},
		{"NotFound", testNotFound},
		{"OwnerIsolation", testOwnerIsolation},
		{"CredentialRoundTrip", testCredentialRoundTrip},
		{"CredentialGeneration", testCredentialGeneration},
		{"DeleteSystemRemovesCredential", testDeleteSystemRemovesCredential},
		{"SystemCredential", testSystemCredential},
		{"Audit", testAudit},
		{"ConcurrentWrites", testConcurrentWrites},
		{"Ping", testPing},
		{"Grants", testGrants},
		{"Links", testLinks},
		{"CreateLimit", testCreateLimit},
		{"SystemLimit", testSystemLimit},
		{"AuditQuery", testAuditQuery},
		{"Disabled", testDisabled},
		{"AccessStamp", testAccessStamp},
		{"UserGroups", testUserGroups},
		{"AuditBatch", testAuditBatch},
		{"Sessions", testSessions},
		{"LoginFlows", testLoginFlows},
		{"Uploads", testUploads},
		{"Temps", testTemps},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newStore(t))
		})
	}
}

func sampleSystem(owner, id string) *store.System {
	return &store.System{
		Owner: owner,
		ID:    id,
		Host:  "login." + id + ".example.org",
		Port:  2222,
		HostKeys: []string{
			"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
			"@cert-authority *.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBqtBM9hnCDOSpDRqeXKDV2vhmQzeP3n1Ylh9hvV5FN2",
		},
		HostKeyFingerprints: []string{"SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"},
		TrustOnFirstUse:     true,
		MaxSessions:         9,
		RootDir:             "/scratch/" + owner,
		Description:         "cluster " + id + " of " + owner,
		Jump:                "bastion-of-" + id,
		Ciphers:             []string{"aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com"},
		KeyExchanges:        []string{"curve25519-sha256"},
	}
}

func sampleCredential(owner, systemID, user string) *store.Credential {
	return &store.Credential{
		Owner:                owner,
		SystemID:             systemID,
		Username:             user,
		KeyType:              "ssh-ed25519",
		PublicKeyFingerprint: "SHA256:abc" + user,
		Certificate:          "ssh-ed25519-cert-v01@openssh.com AAAA" + user,
		Sealed: secret.Sealed{
			KeyID:      "k1",
			WrappedKey: []byte{0, 1, 2, 255, 'w', 'k'},
			Ciphertext: []byte("\x00ciphertext of " + user + "\xff"),
		},
	}
}

// sameSystem reports field differences between two systems, ignoring the
// store-set timestamps and treating nil and empty lists as equal.
func sameSystem(t *testing.T, got, want *store.System) {
	t.Helper()
	norm := func(s store.System) store.System {
		s.CreatedAt, s.UpdatedAt = time.Time{}, time.Time{}
		s.Kind = s.KindOf()
		if len(s.HostKeys) == 0 {
			s.HostKeys = nil
		}
		if len(s.HostKeyFingerprints) == 0 {
			s.HostKeyFingerprints = nil
		}
		if len(s.Ciphers) == 0 {
			s.Ciphers = nil
		}
		if len(s.KeyExchanges) == 0 {
			s.KeyExchanges = nil
		}
		return s
	}
	if g, w := norm(*got), norm(*want); !reflect.DeepEqual(g, w) {
		t.Fatalf("system mismatch:\n got %+v\nwant %+v", g, w)
	}
}

func sameCredential(t *testing.T, got, want *store.Credential) {
	t.Helper()
	if got.Owner != want.Owner || got.SystemID != want.SystemID || got.Username != want.Username ||
		got.KeyType != want.KeyType || got.PublicKeyFingerprint != want.PublicKeyFingerprint ||
		got.Certificate != want.Certificate || got.Generation != want.Generation ||
		got.Sealed.KeyID != want.Sealed.KeyID ||
		!bytes.Equal(got.Sealed.WrappedKey, want.Sealed.WrappedKey) ||
		!bytes.Equal(got.Sealed.Ciphertext, want.Sealed.Ciphertext) ||
		!got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("credential mismatch:\n got %+v\nwant %+v", got, want)
	}
}

// checkStamp fails unless ts was set by the store between before and after
// (microsecond precision, UTC).
func checkStamp(t *testing.T, what string, ts, before, after time.Time) {
	t.Helper()
	if ts.Location() != time.UTC {
		t.Errorf("%s is in %v, want UTC", what, ts.Location())
	}
	if ts.Before(before.Truncate(time.Microsecond)) || ts.After(after) {
		t.Errorf("%s = %v, want between %v and %v", what, ts, before, after)
	}
}

func mustCreate(t *testing.T, s store.Store, sys *store.System) {
	t.Helper()
	if err := s.CreateSystem(t.Context(), sys); err != nil {
		t.Fatalf("CreateSystem(%s/%s): %v", sys.Owner, sys.ID, err)
	}
}

func mustPut(t *testing.T, s store.Store, c *store.Credential) {
	t.Helper()
	if err := s.PutCredential(t.Context(), c); err != nil {
		t.Fatalf("PutCredential(%s/%s): %v", c.Owner, c.SystemID, err)
	}
}

func testCreateGetSystem(t *testing.T, s store.Store) {
	ctx := t.Context()
	before := time.Now()
	sys := sampleSystem("alice", "cluster")
	mustCreate(t, s, sys)
	after := time.Now()
	checkStamp(t, "CreatedAt", sys.CreatedAt, before, after)
	if !sys.UpdatedAt.Equal(sys.CreatedAt) {
		t.Errorf("UpdatedAt %v != CreatedAt %v on create", sys.UpdatedAt, sys.CreatedAt)
	}

	got, err := s.GetSystem(ctx, "alice", "cluster")
	if err != nil {
		t.Fatal(err)
	}
	sameSystem(t, got, sys)
	if !got.CreatedAt.Equal(sys.CreatedAt) || !got.UpdatedAt.Equal(sys.UpdatedAt) {
		t.Errorf("stored times %v/%v differ from returned %v/%v", got.CreatedAt, got.UpdatedAt, sys.CreatedAt, sys.UpdatedAt)
	}

	bare := &store.System{Owner: "alice", ID: "bare", Host: "h", Port: 22}
	mustCreate(t, s, bare)
	got, err = s.GetSystem(ctx, "alice", "bare")
	if err != nil {
		t.Fatal(err)
	}
	sameSystem(t, got, bare)
}

func testCreateConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "cluster"))
	dup := sampleSystem("alice", "cluster")
	dup.Host = "evil.example.org"
	if err := s.CreateSystem(ctx, dup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate CreateSystem = %v, want ErrConflict", err)
	}
	got, err := s.GetSystem(ctx, "alice", "cluster")
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != "login.cluster.example.org" {
		t.Fatalf("conflicting create overwrote the system: host %q", got.Host)
	}
	// The same id under another owner is a different system.
	mustCreate(t, s, sampleSystem("bob", "cluster"))
}

func testInvalidKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	tests := []struct {
		name string
		call func() error
	}{
		{"system without owner", func() error { return s.CreateSystem(ctx, sampleSystem("", "x")) }},
		{"system without id", func() error { return s.CreateSystem(ctx, sampleSystem("alice", "")) }},
		{"credential without owner", func() error { return s.PutCredential(ctx, sampleCredential("", "x", "u")) }},
		{"audit without owner", func() error { return s.AppendAudit(ctx, store.AuditEntry{Action: "a"}) }},
		{"audit without action", func() error { return s.AppendAudit(ctx, store.AuditEntry{Owner: "alice"}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("error = %v, want ErrInvalid", err)
			}
		})
	}
}

func testListSystems(t *testing.T, s store.Store) {
	ctx := t.Context()
	empty, err := s.ListSystems(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if empty == nil || len(empty) != 0 {
		t.Fatalf("ListSystems on no systems = %#v, want empty non-nil", empty)
	}
	for _, id := range []string{"zeta", "alpha", "mid"} {
		mustCreate(t, s, sampleSystem("alice", id))
	}
	mustCreate(t, s, sampleSystem("bob", "beta"))
	got, err := s.ListSystems(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sys := range got {
		ids = append(ids, sys.ID)
		sameSystem(t, &sys, sampleSystem("alice", sys.ID))
	}
	if want := []string{"alpha", "mid", "zeta"}; !slices.Equal(ids, want) {
		t.Fatalf("ListSystems ids = %v, want %v", ids, want)
	}
}

func testUpdateSystem(t *testing.T, s store.Store) {
	ctx := t.Context()
	orig := sampleSystem("alice", "cluster")
	mustCreate(t, s, orig)
	time.Sleep(2 * time.Millisecond)

	upd := &store.System{
		Owner: "alice", ID: "cluster", Host: "new.example.org", Port: 22,
		HostKeys:    []string{"ssh-rsa AAAAB3NzaC1yc2E"},
		MaxSessions: 4, Description: "moved",
	}
	before := time.Now()
	if err := s.UpdateSystem(ctx, upd); err != nil {
		t.Fatal(err)
	}
	checkStamp(t, "UpdatedAt", upd.UpdatedAt, before, time.Now())
	if !upd.CreatedAt.Equal(orig.CreatedAt) {
		t.Errorf("UpdateSystem set CreatedAt %v, want the original %v", upd.CreatedAt, orig.CreatedAt)
	}
	got, err := s.GetSystem(ctx, "alice", "cluster")
	if err != nil {
		t.Fatal(err)
	}
	sameSystem(t, got, upd)
	if !got.CreatedAt.Equal(orig.CreatedAt) || !got.UpdatedAt.After(orig.UpdatedAt) {
		t.Errorf("after update CreatedAt %v UpdatedAt %v; original %v %v", got.CreatedAt, got.UpdatedAt, orig.CreatedAt, orig.UpdatedAt)
	}
}

// testJumpAndAlgorithms checks that the jump host and the cipher and key
// exchange lists round-trip in order, change on update and can be cleared.
func testJumpAndAlgorithms(t *testing.T, s store.Store) {
	ctx := t.Context()
	sys := &store.System{Owner: "alice", ID: "inner", Host: "10.0.0.5", Port: 22, Jump: "bastion",
		Ciphers:      []string{"chacha20-poly1305@openssh.com", "aes128-ctr"},
		KeyExchanges: []string{"sntrup761x25519-sha512@openssh.com", "curve25519-sha256"}}
	mustCreate(t, s, sys)
	got, err := s.GetSystem(ctx, "alice", "inner")
	if err != nil {
		t.Fatal(err)
	}
	if got.Jump != "bastion" || !slices.Equal(got.Ciphers, sys.Ciphers) || !slices.Equal(got.KeyExchanges, sys.KeyExchanges) {
		t.Fatalf("got jump %q ciphers %v kex %v, want %q %v %v", got.Jump, got.Ciphers, got.KeyExchanges, sys.Jump, sys.Ciphers, sys.KeyExchanges)
	}
	got.Jump, got.Ciphers, got.KeyExchanges = "other", []string{"aes256-ctr"}, nil
	if err := s.UpdateSystem(ctx, got); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSystems(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Jump != "other" || !slices.Equal(list[0].Ciphers, []string{"aes256-ctr"}) || len(list[0].KeyExchanges) != 0 {
		t.Fatalf("after update: %+v", list)
	}
	got.Jump, got.Ciphers = "", nil
	if err := s.UpdateSystem(ctx, got); err != nil {
		t.Fatal(err)
	}
	again, err := s.GetSystem(ctx, "alice", "inner")
	if err != nil {
		t.Fatal(err)
	}
	if again.Jump != "" || len(again.Ciphers) != 0 {
		t.Fatalf("cleared jump/ciphers read back as %q %v", again.Jump, again.Ciphers)
	}
}

// testS3System checks that a system without a kind reads back as ssh, that
// an s3 system's fields round-trip, change on update and list, and that its
// credential (access key id in Username) round-trips like an SSH key.
func testS3System(t *testing.T, s store.Store) {
	ctx := t.Context()
	plain := &store.System{Owner: "alice", ID: "login", Host: "10.0.0.5", Port: 22}
	mustCreate(t, s, plain)
	got, err := s.GetSystem(ctx, "alice", "login")
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != store.KindSSH || got.Endpoint != "" || got.Bucket != "" || got.PathStyle {
		t.Fatalf("a system without kind read back as kind %q endpoint %q bucket %q path_style %v", got.Kind, got.Endpoint, got.Bucket, got.PathStyle)
	}
	sys := &store.System{Owner: "alice", ID: "bucket", Kind: store.KindS3, Endpoint: "https://s3.example.org:9000",
		Region: "eu-west-1", Bucket: "data", Prefix: "projects/x", PathStyle: true, Description: "object store"}
	mustCreate(t, s, sys)
	got, err = s.GetSystem(ctx, "alice", "bucket")
	if err != nil {
		t.Fatal(err)
	}
	sameSystem(t, got, sys)
	got.Endpoint, got.Region, got.Bucket, got.Prefix, got.PathStyle = "http://127.0.0.1:7070", "us-east-1", "other", "", false
	if err := s.UpdateSystem(ctx, got); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSystems(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("list: %+v", list)
	}
	sameSystem(t, &list[0], got)
	if list[0].Kind != store.KindS3 || list[1].Kind != store.KindSSH {
		t.Fatalf("kinds listed: %q %q", list[0].Kind, list[1].Kind)
	}
	cred := &store.Credential{Owner: "alice", SystemID: "bucket", Username: "AKIAEXAMPLE", KeyType: store.CredentialS3,
		Sealed: secret.Sealed{KeyID: "k1", WrappedKey: []byte("w"), Ciphertext: []byte("c")}}
	mustPut(t, s, cred)
	gc, err := s.GetCredential(ctx, "alice", "bucket")
	if err != nil {
		t.Fatal(err)
	}
	sameCredential(t, gc, cred)
}

func testDeleteSystem(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "a"))
	mustCreate(t, s, sampleSystem("alice", "b"))
	if err := s.DeleteSystem(ctx, "alice", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSystem(ctx, "alice", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSystem after delete = %v, want ErrNotFound", err)
	}
	if err := s.DeleteSystem(ctx, "alice", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second DeleteSystem = %v, want ErrNotFound", err)
	}
	list, err := s.ListSystems(ctx, "alice")
	if err != nil || len(list) != 1 || list[0].ID != "b" {
		t.Fatalf("ListSystems after delete = %v, %v; want only b", list, err)
	}
	// The id can be reused.
	mustCreate(t, s, sampleSystem("alice", "a"))
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "cluster")) // a system without credential
	tests := []struct {
		name string
		call func() error
	}{
		{"GetSystem", func() error { _, err := s.GetSystem(ctx, "alice", "nope"); return err }},
		{"UpdateSystem", func() error { return s.UpdateSystem(ctx, sampleSystem("alice", "nope")) }},
		{"DeleteSystem", func() error { return s.DeleteSystem(ctx, "alice", "nope") }},
		{"PutCredential without system", func() error { return s.PutCredential(ctx, sampleCredential("alice", "nope", "u")) }},
		{"GetCredential without system", func() error { _, err := s.GetCredential(ctx, "alice", "nope"); return err }},
		{"GetCredential without credential", func() error { _, err := s.GetCredential(ctx, "alice", "cluster"); return err }},
		{"DeleteCredential", func() error { return s.DeleteCredential(ctx, "alice", "cluster") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("error = %v, want ErrNotFound", err)
			}
		})
	}
}

func testOwnerIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	alice := sampleSystem("alice", "cluster")
	mustCreate(t, s, alice)
	cred := sampleCredential("alice", "cluster", "alice_hpc")
	mustPut(t, s, cred)
	if err := s.AppendAudit(ctx, store.AuditEntry{Owner: "alice", Action: "system.create", SystemID: "cluster"}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		call func() error
	}{
		{"GetSystem", func() error { _, err := s.GetSystem(ctx, "bob", "cluster"); return err }},
		{"UpdateSystem", func() error { return s.UpdateSystem(ctx, sampleSystem("bob", "cluster")) }},
		{"DeleteSystem", func() error { return s.DeleteSystem(ctx, "bob", "cluster") }},
		{"GetCredential", func() error { _, err := s.GetCredential(ctx, "bob", "cluster"); return err }},
		{"DeleteCredential", func() error { return s.DeleteCredential(ctx, "bob", "cluster") }},
		{"PutCredential", func() error { return s.PutCredential(ctx, sampleCredential("bob", "cluster", "mallory")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("bob's %s on alice's system = %v, want ErrNotFound", tt.name, err)
			}
		})
	}
	if list, err := s.ListSystems(ctx, "bob"); err != nil || len(list) != 0 {
		t.Fatalf("bob's ListSystems = %v, %v; want empty", list, err)
	}
	if list, err := s.ListAudit(ctx, "bob", 10); err != nil || len(list) != 0 {
		t.Fatalf("bob's ListAudit = %v, %v; want empty", list, err)
	}

	// Alice's data is untouched by all of the above.
	got, err := s.GetSystem(ctx, "alice", "cluster")
	if err != nil {
		t.Fatal(err)
	}
	sameSystem(t, got, alice)
	gotCred, err := s.GetCredential(ctx, "alice", "cluster")
	if err != nil {
		t.Fatal(err)
	}
	sameCredential(t, gotCred, cred)
}

func testCredentialRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "cluster"))
	c := sampleCredential("alice", "cluster", "alice_hpc")
	before := time.Now()
	mustPut(t, s, c)
	checkStamp(t, "CreatedAt", c.CreatedAt, before, time.Now())
	if c.Generation <= 0 {
		t.Fatalf("Generation = %d, want > 0", c.Generation)
	}
	got, err := s.GetCredential(ctx, "alice", "cluster")
	if err != nil {
		t.Fatal(err)
	}
	sameCredential(t, got, c)

	if err := s.DeleteCredential(ctx, "alice", "cluster"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCredential(ctx, "alice", "cluster"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetCredential after delete = %v, want ErrNotFound", err)
	}
	if _, err := s.GetSystem(ctx, "alice", "cluster"); err != nil {
		t.Fatalf("DeleteCredential removed the system: %v", err)
	}
}

func testCredentialGeneration(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "a"))
	mustCreate(t, s, sampleSystem("alice", "b"))

	var last int64
	steps := []struct {
		name string
		do   func() *store.Credential
	}{
		{"first put", func() *store.Credential { c := sampleCredential("alice", "a", "u1"); mustPut(t, s, c); return c }},
		{"replace", func() *store.Credential { c := sampleCredential("alice", "a", "u2"); mustPut(t, s, c); return c }},
		{"put same again", func() *store.Credential { c := sampleCredential("alice", "a", "u2"); mustPut(t, s, c); return c }},
		{"other system", func() *store.Credential { c := sampleCredential("alice", "b", "u1"); mustPut(t, s, c); return c }},
		{"after delete", func() *store.Credential {
			if err := s.DeleteCredential(ctx, "alice", "a"); err != nil {
				t.Fatal(err)
			}
			c := sampleCredential("alice", "a", "u1")
			mustPut(t, s, c)
			return c
		}},
	}
	for _, st := range steps {
		c := st.do()
		if c.Generation <= last {
			t.Fatalf("%s: Generation %d, want > %d", st.name, c.Generation, last)
		}
		last = c.Generation
		got, err := s.GetCredential(ctx, c.Owner, c.SystemID)
		if err != nil {
			t.Fatal(err)
		}
		sameCredential(t, got, c)
	}
}

// testSystemCredential checks the joined read access decisions make: it sees exactly what
// GetSystem and GetCredential see after every change (a stale answer would let a deleted
// credential or system keep working).
func testSystemCredential(t *testing.T, s store.Store) {
	ctx := t.Context()
	sys := sampleSystem("alice", "cluster")
	mustCreate(t, s, sys)
	mustCreate(t, s, sampleSystem("alice", "other"))
	mustPut(t, s, sampleCredential("alice", "other", "someone_else"))
	var cur *store.Credential
	steps := []struct {
		name string
		do   func()
	}{
		{"no credential", func() {}},
		{"credential put", func() { cur = sampleCredential("alice", "cluster", "u1"); mustPut(t, s, cur) }},
		{"credential replaced", func() { cur = sampleCredential("alice", "cluster", "u2"); mustPut(t, s, cur) }},
		{"system updated", func() {
			sys.Description = "changed"
			sys.UpdatedAt = time.Time{}
			if err := s.UpdateSystem(ctx, sys); err != nil {
				t.Fatal(err)
			}
		}},
		{"credential deleted", func() {
			if err := s.DeleteCredential(ctx, "alice", "cluster"); err != nil {
				t.Fatal(err)
			}
			cur = nil
		}},
	}
	for _, st := range steps {
		st.do()
		gotSys, gotCred, err := s.GetSystemCredential(ctx, "alice", "cluster")
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		wantSys, err := s.GetSystem(ctx, "alice", "cluster")
		if err != nil {
			t.Fatal(err)
		}
		sameSystem(t, gotSys, wantSys)
		if !gotSys.UpdatedAt.Equal(wantSys.UpdatedAt) {
			t.Fatalf("%s: UpdatedAt %v, want %v", st.name, gotSys.UpdatedAt, wantSys.UpdatedAt)
		}
		switch {
		case cur == nil && gotCred != nil:
			t.Fatalf("%s: credential %+v, want none", st.name, gotCred)
		case cur != nil && gotCred == nil:
			t.Fatalf("%s: no credential, want generation %d", st.name, cur.Generation)
		case cur != nil:
			sameCredential(t, gotCred, cur)
		}
	}
	if err := s.DeleteSystem(ctx, "alice", "cluster"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetSystemCredential(ctx, "alice", "cluster"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after DeleteSystem: %v, want ErrNotFound", err)
	}
	if _, _, err := s.GetSystemCredential(ctx, "bob", "other"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another owner's system: %v, want ErrNotFound", err)
	}
}

func testDeleteSystemRemovesCredential(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "cluster"))
	first := sampleCredential("alice", "cluster", "u")
	mustPut(t, s, first)
	if err := s.DeleteSystem(ctx, "alice", "cluster"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCredential(ctx, "alice", "cluster"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetCredential after DeleteSystem = %v, want ErrNotFound", err)
	}
	// A re-created system starts without a credential, and a new credential
	// never reuses the old generation (pools keyed on it must not be reused).
	mustCreate(t, s, sampleSystem("alice", "cluster"))
	if _, err := s.GetCredential(ctx, "alice", "cluster"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("re-created system inherited a credential: %v", err)
	}
	second := sampleCredential("alice", "cluster", "u")
	mustPut(t, s, second)
	if second.Generation <= first.Generation {
		t.Fatalf("generation after re-create %d, want > %d", second.Generation, first.Generation)
	}
}

func testAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	base := time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC)
	entries := []store.AuditEntry{
		{Time: base, Owner: "alice", Action: "system.create", SystemID: "a", Detail: "first"},
		{Time: base.Add(2 * time.Second), Owner: "alice", Action: "credential.put", SystemID: "a", Detail: "third"},
		{Time: base.Add(time.Second), Owner: "alice", Action: "command.run", SystemID: "a", Detail: "second"},
		{Time: base.Add(2 * time.Second), Owner: "alice", Action: "credential.put", SystemID: "a", Detail: "fourth (same time, later)"},
		{Time: base.Add(3 * time.Second), Owner: "bob", Action: "system.create", SystemID: "b", Detail: "bob's"},
	}
	for _, e := range entries {
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		owner string
		limit int
		want  []string
	}{
		{"alice", 10, []string{"fourth (same time, later)", "third", "second", "first"}},
		{"alice", 2, []string{"fourth (same time, later)", "third"}},
		{"alice", 0, []string{"fourth (same time, later)", "third", "second", "first"}},
		{"bob", 10, []string{"bob's"}},
		{"carol", 10, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/limit%d", tt.owner, tt.limit), func(t *testing.T) {
			got, err := s.ListAudit(ctx, tt.owner, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			var details []string
			for _, e := range got {
				details = append(details, e.Detail)
				if e.Owner != tt.owner {
					t.Errorf("entry of %q listed for %q", e.Owner, tt.owner)
				}
			}
			if !slices.Equal(details, tt.want) {
				t.Fatalf("ListAudit = %q, want %q", details, tt.want)
			}
		})
	}
	got, err := s.ListAudit(ctx, "alice", 10)
	if err != nil {
		t.Fatal(err)
	}
	if g, want := got[3], entries[0]; !g.Time.Equal(want.Time) || g.Owner != want.Owner ||
		g.Action != want.Action || g.SystemID != want.SystemID || g.Detail != want.Detail {
		t.Fatalf("stored entry %+v, want %+v", g, want)
	}

	before := time.Now()
	if err := s.AppendAudit(ctx, store.AuditEntry{Owner: "dave", Action: "token.use"}); err != nil {
		t.Fatal(err)
	}
	got, err = s.ListAudit(ctx, "dave", 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("ListAudit(dave) = %v, %v", got, err)
	}
	checkStamp(t, "zero audit Time", got[0].Time, before, time.Now())
}

func testConcurrentWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	const workers, rounds = 20, 5
	mustCreate(t, s, sampleSystem("shared", "cluster"))
	var (
		mu   sync.Mutex
		gens = map[int64]bool{}
		wg   sync.WaitGroup
	)
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprintf("user%02d", w)
			err := func() error {
				if err := s.CreateSystem(ctx, sampleSystem(owner, "cluster")); err != nil {
					return err
				}
				for r := range rounds {
					for _, c := range []*store.Credential{
						sampleCredential(owner, "cluster", fmt.Sprintf("u%d", r)),
						sampleCredential("shared", "cluster", owner),
					} {
						if err := s.PutCredential(ctx, c); err != nil {
							return err
						}
						mu.Lock()
						dup := gens[c.Generation]
						gens[c.Generation] = true
						mu.Unlock()
						if dup {
							return fmt.Errorf("generation %d handed out twice", c.Generation)
						}
					}
					sys := sampleSystem(owner, "cluster")
					sys.Description = fmt.Sprintf("round %d", r)
					if err := s.UpdateSystem(ctx, sys); err != nil {
						return err
					}
					if err := s.AppendAudit(ctx, store.AuditEntry{Owner: owner, Action: "round", Detail: fmt.Sprint(r)}); err != nil {
						return err
					}
					if _, err := s.ListSystems(ctx, owner); err != nil {
						return err
					}
				}
				return nil
			}()
			if err != nil {
				errs <- fmt.Errorf("%s: %w", owner, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := range workers {
		owner := fmt.Sprintf("user%02d", w)
		audit, err := s.ListAudit(ctx, owner, 100)
		if err != nil || len(audit) != rounds {
			t.Errorf("%s: %d audit entries (%v), want %d", owner, len(audit), err, rounds)
		}
		c, err := s.GetCredential(ctx, owner, "cluster")
		if err != nil || c.Username != fmt.Sprintf("u%d", rounds-1) {
			t.Errorf("%s: final credential %+v, %v", owner, c, err)
		}
	}
}

func testPing(t *testing.T, s store.Store) {
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
