package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

func newUpload(id, owner string, length int64, expires time.Time) *store.Upload {
	return &store.Upload{ID: id, Owner: owner, SystemRef: "hpc", SystemOwner: owner, SystemID: "hpc", Path: "x", Dest: "/home/x",
		PartName: ".x.sshapi-0123456789abcdef.part", Length: length, HashState: []byte("h0"), SHA256: "ab", Overwrite: true, ExpiresAt: expires}
}

// testUploads checks resumable uploads: round trip, owner isolation, per-owner bounds, leases
// (one holder at a time, expiry, commit only by the holder) and expiry listing.
func testUploads(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	later := now.Add(time.Hour)
	u := newUpload("u1", "alice", 100, later)
	if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: u, Now: now}); err != nil {
		t.Fatal(err)
	}
	if u.CreatedAt.IsZero() {
		t.Fatal("CreatedAt not set")
	}
	if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: newUpload("u1", "alice", 1, later), Now: now}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := s.GetUpload(ctx, "alice", "u1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Length != 100 || got.Offset != 0 || string(got.HashState) != "h0" || !got.Overwrite || got.Parents || got.Dest != "/home/x" ||
		!got.ExpiresAt.Equal(later.Truncate(time.Microsecond)) {
		t.Fatalf("got %+v", got)
	}
	if _, err := s.GetUpload(ctx, "bob", "u1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other owner: %v", err)
	}
	// Bounds: open uploads and reserved bytes per owner; expired ones do not count.
	if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: newUpload("u2", "alice", 1, later), Now: now, MaxOpen: 1}); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("max open: %v", err)
	}
	if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: newUpload("u2", "alice", 101, later), Now: now, MaxBytes: 200}); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("max bytes: %v", err)
	}
	if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: newUpload("u2", "alice", 100, later), Now: now, MaxBytes: 200, MaxOpen: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: newUpload("b1", "bob", 100, now.Add(-time.Minute)), Now: now, MaxOpen: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: newUpload("b2", "bob", 100, later), Now: now, MaxOpen: 1}); err != nil {
		t.Fatalf("an expired upload counted: %v", err)
	}
	// Leases.
	lp := &store.LeaseUploadParams{Owner: "alice", ID: "u1", Token: "t1", Now: now, Until: now.Add(time.Minute)}
	if _, err := s.LeaseUpload(ctx, lp); err != nil {
		t.Fatal(err)
	}
	other := &store.LeaseUploadParams{Owner: "alice", ID: "u1", Token: "t2", Now: now, Until: now.Add(time.Minute)}
	if _, err := s.LeaseUpload(ctx, other); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second lease: %v", err)
	}
	if _, err := s.LeaseUpload(ctx, &store.LeaseUploadParams{Owner: "bob", ID: "u1", Token: "t3", Now: now, Until: now}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other owner's lease: %v", err)
	}
	if err := s.CommitUpload(ctx, &store.LeaseUploadParams{Owner: "alice", ID: "u1", Token: "t2", Offset: 5, Until: now}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("commit without the lease: %v", err)
	}
	if err := s.CommitUpload(ctx, &store.LeaseUploadParams{Owner: "alice", ID: "u1", Token: "t1", Offset: 42, HashState: []byte("h42"),
		Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetUpload(ctx, "alice", "u1"); got.Offset != 42 || string(got.HashState) != "h42" {
		t.Fatalf("after commit: %+v", got)
	}
	// Renewal: only by the holder, the committed state untouched; a renewed lease is not taken
	// over when the first one would have lapsed.
	if err := s.RenewUpload(ctx, &store.LeaseUploadParams{Owner: "alice", ID: "u1", Token: "t2", Until: now.Add(time.Hour)}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("renewal without the lease: %v", err)
	}
	if err := s.RenewUpload(ctx, &store.LeaseUploadParams{Owner: "alice", ID: "u1", Token: "t1", Until: now.Add(90 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetUpload(ctx, "alice", "u1"); got.Offset != 42 || string(got.HashState) != "h42" {
		t.Fatalf("after renewal: %+v", got)
	}
	if _, err := s.LeaseUpload(ctx, &store.LeaseUploadParams{Owner: "alice", ID: "u1", Token: "t2", Now: now.Add(75 * time.Second),
		Until: now.Add(time.Hour)}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("a renewed lease taken over: %v", err)
	}
	if err := s.RenewUpload(ctx, &store.LeaseUploadParams{Owner: "nobody", ID: "u1", Token: "t1", Until: now}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("renewal of another owner's upload: %v", err)
	}
	// An expired lease can be taken over; a released one at once.
	other.Now = now.Add(2 * time.Minute)
	other.Until = other.Now.Add(time.Minute)
	if _, err := s.LeaseUpload(ctx, other); err != nil {
		t.Fatalf("expired lease: %v", err)
	}
	if err := s.ReleaseUpload(ctx, "alice", "u1", "t2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LeaseUpload(ctx, lp); err != nil {
		t.Fatalf("released lease: %v", err)
	}
	if err := s.ReleaseUpload(ctx, "alice", "u1", "t1"); err != nil {
		t.Fatal(err)
	}
	// Concurrent leases: exactly one wins.
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.LeaseUpload(ctx, &store.LeaseUploadParams{Owner: "alice", ID: "u2", Token: string(rune('a' + i)), Now: now, Until: later})
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, store.ErrLocked) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d concurrent leases won", wins)
	}
	// Expiry: only expired, unleased uploads.
	exp, err := s.ExpiredUploads(ctx, now, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != 1 || exp[0].ID != "b1" {
		t.Fatalf("expired: %+v", exp)
	}
	if err := s.DeleteUpload(ctx, "bob", "b1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUpload(ctx, "bob", "b1"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.GetUpload(ctx, "bob", "b1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted: %v", err)
	}
	// An upload a sweep put off (its lease lapsed) comes after those never leased, however old.
	for i, id := range []string{"c1", "c2"} {
		if err := s.CreateUpload(ctx, &store.CreateUploadParams{Upload: newUpload(id, "carol", 1, now.Add(time.Duration(i-10)*time.Minute)), Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LeaseUpload(ctx, &store.LeaseUploadParams{Owner: "carol", ID: "c1", Token: "sweep", Now: now, Until: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if exp, err := s.ExpiredUploads(ctx, now, 10); err != nil || len(exp) != 2 || exp[0].ID != "c2" || exp[1].ID != "c1" {
		t.Fatalf("expired after a put-off: %+v %v", exp, err)
	}
}
