package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sshapi/sshapi/internal/store"
)

// testUpdateSystemConditional: an update carrying the UpdatedAt it read fails with ErrConflict
// once the row changed since, and changes nothing.
func testUpdateSystemConditional(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, sampleSystem("alice", "c"))
	a, err := s.GetSystem(ctx, "alice", "c")
	if err != nil {
		t.Fatal(err)
	}
	b := *a
	a.Description = "first writer"
	if err := s.UpdateSystem(ctx, a); err != nil {
		t.Fatalf("first conditional update: %v", err)
	}
	b.Description = "second writer, stale read"
	if err := s.UpdateSystem(ctx, &b); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale conditional update = %v, want ErrConflict", err)
	}
	got, err := s.GetSystem(ctx, "alice", "c")
	if err != nil {
		t.Fatal(err)
	}
	if got.Description != "first writer" {
		t.Fatalf("description = %q after a refused stale update, want the first writer's", got.Description)
	}
	missing := sampleSystem("alice", "nope")
	missing.UpdatedAt = got.UpdatedAt
	if err := s.UpdateSystem(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("conditional update of a missing system = %v, want ErrNotFound", err)
	}
}

// testPinHostKey: the pin is taken only while nothing is registered, clears trust on first use,
// and never replaces registered keys.
func testPinHostKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	tofu := sampleSystem("alice", "tofu")
	tofu.HostKeys, tofu.HostKeyFingerprints, tofu.TrustOnFirstUse = nil, nil, true
	mustCreate(t, s, tofu)
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	sys, pinned, err := s.PinHostKey(ctx, "alice", "tofu", key)
	if err != nil || !pinned {
		t.Fatalf("first PinHostKey = %v, %v; want pinned", pinned, err)
	}
	if len(sys.HostKeys) != 1 || sys.HostKeys[0] != key || sys.TrustOnFirstUse {
		t.Fatalf("after pin: keys %v tofu %v", sys.HostKeys, sys.TrustOnFirstUse)
	}
	other := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBqtBM9hnCDOSpDRqeXKDV2vhmQzeP3n1Ylh9hvV5FN2"
	sys, pinned, err = s.PinHostKey(ctx, "alice", "tofu", other)
	if err != nil || pinned {
		t.Fatalf("second PinHostKey = %v, %v; want not pinned", pinned, err)
	}
	if sys.HostKeys[0] != key {
		t.Fatalf("second pin replaced the key: %v", sys.HostKeys)
	}
	fp := sampleSystem("alice", "fp")
	fp.HostKeys = nil
	mustCreate(t, s, fp)
	if _, pinned, err := s.PinHostKey(ctx, "alice", "fp", other); err != nil || pinned {
		t.Fatalf("PinHostKey on a system with a fingerprint = %v, %v; want not pinned", pinned, err)
	}
	if _, _, err := s.PinHostKey(ctx, "alice", "absent", other); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PinHostKey on a missing system = %v, want ErrNotFound", err)
	}
	if _, _, err := s.PinHostKey(ctx, "bob", "tofu", other); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PinHostKey on another owner's system = %v, want ErrNotFound", err)
	}
}

// testPinHostKeyConcurrent: many first connections racing to pin different keys pin exactly one.
func testPinHostKeyConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	tofu := sampleSystem("alice", "race")
	tofu.HostKeys, tofu.HostKeyFingerprints, tofu.TrustOnFirstUse = nil, nil, true
	mustCreate(t, s, tofu)
	const n = 16
	var wg sync.WaitGroup
	wins := make(chan string, n)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GK%02d", i)
			_, pinned, err := s.PinHostKey(ctx, "alice", "race", key)
			if err != nil {
				errs <- err
				return
			}
			if pinned {
				wins <- key
			}
		}()
	}
	wg.Wait()
	close(wins)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var won []string
	for k := range wins {
		won = append(won, k)
	}
	if len(won) != 1 {
		t.Fatalf("%d concurrent pins succeeded, want exactly 1", len(won))
	}
	sys, err := s.GetSystem(ctx, "alice", "race")
	if err != nil {
		t.Fatal(err)
	}
	if len(sys.HostKeys) != 1 || sys.HostKeys[0] != won[0] {
		t.Fatalf("stored keys %v, want only the winner %s", sys.HostKeys, won[0])
	}
}
