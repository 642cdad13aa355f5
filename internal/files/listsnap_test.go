package files

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestListSnapshot lists a 3,000-entry directory through a Snapshots cache: every page and
// order equals a listing without one; a change to a file's size made behind the API's back is
// not seen while the snapshot is served (so pages do come from it) and is seen after
// Invalidate; an entry created in the directory is seen at once (its mtime changed); a share
// too small to hold the directory keeps nothing.
func TestListSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = 3000
	for i := range n {
		name := fmt.Sprintf("f%05d", (i*7919)%n)
		if err := os.WriteFile(filepath.Join(e.dir, name), make([]byte, i%97), 0o644); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			if err := os.Symlink("target-"+name, filepath.Join(e.dir, "l"+name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(filepath.Join(e.dir, name), time.Time{}, time.Unix(int64(1_600_000_000+i%13), 0)); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Minute)
	ageDir := func() {
		t.Helper()
		if err := os.Chtimes(e.dir, old, old); err != nil {
			t.Fatal(err)
		}
	}
	ageDir()
	plain := e.fs(Options{StreamDirBytes: 1, ListCommand: true})
	snaps := NewSnapshots(SnapshotConfig{Bytes: 64 << 20, PerOwnerBytes: 32 << 20, TTL: time.Hour})
	withSnap := func(o ListOptions) ListOptions {
		o.Snapshots, o.SnapshotID, o.SnapshotOwner = snaps, "sys\x00user", "alice"
		return o
	}
	list := func(f *FS, o ListOptions) *Listing {
		t.Helper()
		l, err := f.List(ctx, e.dir, o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, o := range []ListOptions{
		{Limit: 200},
		{Limit: 200, Offset: 2900},
		{Limit: 100, After: "f01234"},
		{Limit: 100, After: "zzz"},
		{Limit: 50, Sort: SortSize, Desc: true},
		{Limit: 50, Offset: 1000, Sort: SortTime},
		{Limit: 70, Sort: SortName, Desc: true, Offset: 3000},
		{Pattern: "lf*"},
		{},
	} {
		want, got := list(plain, o), list(e.fs(Options{StreamDirBytes: 1, ListCommand: true}), withSnap(o))
		if !slices.EqualFunc(want.Entries, got.Entries, func(a, b Entry) bool { return a == b }) || want.Total != got.Total ||
			want.NextOffset != got.NextOffset || want.NextAfter != got.NextAfter {
			t.Fatalf("%+v: with a snapshot %d entries (total %d, next %d %q), without %d (total %d, next %d %q)", o,
				len(got.Entries), got.Total, got.NextOffset, got.NextAfter, len(want.Entries), want.Total, want.NextOffset, want.NextAfter)
		}
	}
	if len(snaps.m) != 1 { // the whole directory; the 6 entries matching lf* are listed again each time
		t.Fatalf("%d snapshots kept, want 1", len(snaps.m))
	}

	// A size changed behind the API's back: the snapshot still answers until invalidated.
	target := filepath.Join(e.dir, "f00000")
	if err := os.WriteFile(target, make([]byte, 12345), 0o644); err != nil {
		t.Fatal(err)
	}
	ageDir()
	f := e.fs(Options{StreamDirBytes: 1, ListCommand: true})
	if got := list(f, withSnap(ListOptions{Limit: 1})).Entries[0]; got.Name != "f00000" || got.Size == 12345 {
		t.Fatalf("first entry %+v: want f00000 as the snapshot has it", got)
	}
	snaps.Invalidate("sys\x00user")
	if got := list(f, withSnap(ListOptions{Limit: 1})).Entries[0]; got.Size != 12345 {
		t.Fatalf("after Invalidate: size %d, want 12345", got.Size)
	}

	// An entry created in the directory changes its mtime: seen at once.
	if err := os.WriteFile(filepath.Join(e.dir, "a-new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if l := list(f, withSnap(ListOptions{Limit: 1})); l.Entries[0].Name != "a-new" || l.Total != n+n/500+1 {
		t.Fatalf("after a create: first %q, total %d", l.Entries[0].Name, l.Total)
	}

	// A share smaller than the directory keeps nothing, and gives every byte back.
	small := NewSnapshots(SnapshotConfig{Bytes: 64 << 20, PerOwnerBytes: 64 << 10, TTL: time.Hour})
	ageDir()
	o := ListOptions{Limit: 10, Snapshots: small, SnapshotID: "x", SnapshotOwner: "bob"}
	list(f, o)
	if len(small.m) != 0 || small.used != 0 || len(small.owners) != 0 {
		t.Fatalf("small share: %d kept, %d bytes reserved (%v)", len(small.m), small.used, small.owners)
	}
}
