package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// testTemps checks the temporary-name records: durable insert, conflict, renewal keeps a record
// from being claimed, a lapsed lease is claimed exactly once however many claim at once, and
// forgotten records are gone.
func testTemps(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Now().UTC()
	rec := func(id string, lease time.Time) *store.TempFile {
		tf := &store.TempFile{ID: id, SystemOwner: "alice", SystemID: "hpc", Dir: "/home/alice/d", Name: ".f.sshapi-0123456789abcdef.part",
			LeaseUntil: lease}
		if err := s.RecordTemp(ctx, tf); err != nil {
			t.Fatalf("record %s: %v", id, err)
		}
		if tf.CreatedAt.IsZero() {
			t.Fatal("CreatedAt not set")
		}
		return tf
	}
	rec("live", now.Add(time.Minute))
	rec("lapsed", now.Add(-time.Second))
	rec("renewed", now.Add(-time.Second))
	if err := s.RecordTemp(ctx, &store.TempFile{ID: "live", SystemOwner: "alice", SystemID: "hpc", Dir: "/", Name: "x"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate id: %v", err)
	}
	if err := s.RecordTemp(ctx, &store.TempFile{ID: "x", SystemID: "hpc"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no owner: %v", err)
	}
	if err := s.RenewTemps(ctx, []string{"renewed", "missing"}, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	// Eight claimers at once: the one lapsed record goes to exactly one of them.
	var mu sync.Mutex
	var claimed []store.TempFile
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got, err := s.ClaimTemps(ctx, now, now.Add(time.Hour), 10)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			claimed = append(claimed, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(claimed) != 1 || claimed[0].ID != "lapsed" || claimed[0].Dir != "/home/alice/d" || claimed[0].SystemOwner != "alice" ||
		!claimed[0].LeaseUntil.Equal(now.Add(time.Hour).Truncate(time.Microsecond)) {
		t.Fatalf("claimed %+v", claimed)
	}
	// Claimed, its lease runs again: not claimable until it lapses.
	if got, err := s.ClaimTemps(ctx, now.Add(time.Minute+time.Second), now.Add(2*time.Hour), 10); err != nil || len(got) != 2 {
		t.Fatalf("after the live leases lapse: %+v %v", got, err)
	} else if ids := []string{got[0].ID, got[1].ID}; !slices.Contains(ids, "live") || !slices.Contains(ids, "renewed") {
		t.Fatalf("claimed %v", ids)
	}
	many := make([]string, 0, 1200)
	for i := range 1200 { // more than one statement's batch
		many = append(many, string(rune('a'+i%26))+time.Duration(i).String())
	}
	if err := s.ForgetTemps(ctx, append(many, "live", "lapsed", "renewed")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ClaimTemps(ctx, now.Add(24*time.Hour), now.Add(25*time.Hour), 10); err != nil || len(got) != 0 {
		t.Fatalf("forgotten records claimed: %+v %v", got, err)
	}
	// A multipart upload's record keeps its bucket and upload id.
	up := &store.TempFile{ID: "mpu", SystemOwner: "alice", SystemID: "s3", Name: "/d/f", Bucket: "b1", UploadID: "u-123",
		LeaseUntil: now.Add(-time.Second)}
	if err := s.RecordTemp(ctx, up); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ClaimTemps(ctx, now, now.Add(time.Hour), 10); err != nil || len(got) != 1 || got[0].Bucket != "b1" ||
		got[0].UploadID != "u-123" || got[0].Name != "/d/f" || got[0].Dir != "" {
		t.Fatalf("claimed upload record %+v %v", got, err)
	}
}
