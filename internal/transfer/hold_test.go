package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// errHeld stands for a guard another principal holds (access answers its own busy error).
var errHeld = errors.New("shared files busy")

// TestRunWaitsForTheGuard: while the destination's guard cannot be had, the run does not touch
// the files and says why; when it can, the transfer finishes. The run holds the guard while it
// plans and during each round, and gives it back every time.
func TestRunWaitsForTheGuard(t *testing.T) {
	h := newHarness(t, testConfig())
	a := sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "shared", a, "")
	var calls, held atomic.Int64
	var busy atomic.Bool
	busy.Store(true)
	h.sys.mu.Lock()
	s := h.sys.m["alice/shared"]
	s.HoldKey = "bob"
	s.Hold = func(ctx context.Context) (context.Context, func(), error) {
		calls.Add(1)
		if busy.Load() && calls.Load() > 1 { // setup gets it; the rounds wait
			return nil, nil, errHeld
		}
		held.Add(1)
		return ctx, func() { held.Add(-1) }, nil
	}
	h.sys.m["alice/shared"] = s
	h.sys.mu.Unlock()
	dir := a.MkTemp(t)
	randomFile(t, filepath.Join(dir, "f"), 1<<20, 7)
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"f", "l"} {
		if err := os.Rename(filepath.Join(dir, n), filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	owned(t, a, dir, src, filepath.Join(src, "f"), filepath.Join(src, "l"))
	tr := h.submit("alice", Request{Recursive: true, Source: Endpoint{System: "a", Path: src},
		Destination: Endpoint{System: "shared", Path: filepath.Join(dir, "dst")}})
	got := h.wait("alice", tr.ID, time.Minute, func(t *Transfer) bool { return strings.Contains(t.Error, "shared files busy") })
	if _, err := os.Stat(filepath.Join(dir, "dst", "f")); err == nil {
		t.Fatalf("a file was written while the guard was held elsewhere (status %s)", got.Status)
	}
	busy.Store(false)
	got = h.wait("alice", tr.ID, time.Minute, func(t *Transfer) bool { return t.Status.Terminal() })
	if held.Load() != 0 {
		t.Fatalf("%d holds not given back", held.Load())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "dst", "f")); err != nil || len(b) != 1<<20 {
		t.Fatalf("file not transferred after the guard was free: %v (status %s, %s)", err, got.Status, got.Error)
	}
	if _, err := os.Lstat(filepath.Join(dir, "dst", "l")); err == nil {
		t.Fatal("a symlink was recreated in a shared destination")
	}
	items, err := h.eng.Items(t.Context(), "alice", tr.ID, 0, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var linkErr string
	for _, it := range items {
		if it.Kind == KindSymlink {
			linkErr = it.Error
		}
	}
	if !strings.Contains(linkErr, "not recreated in a destination shared with you") {
		t.Fatalf("symlink item error %q", linkErr)
	}
}

// TestSharedRunHoldsPerChunk: a run into a shared destination holds the owner's guard one chunk
// at a time and gives it back in between, so a move by someone else could run there: at each of
// the run's holds an exclusive hold (a move) is had at once.
func TestSharedRunHoldsPerChunk(t *testing.T) {
	cfg := testConfig()
	cfg.SharedChunkItems = 5
	h := newHarness(t, cfg)
	a := sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "shared", a, "")
	g := guard.New(guard.Config{Wait: 5 * time.Second}, nil)
	var holds, movesRefused atomic.Int64
	h.sys.mu.Lock()
	s := h.sys.m["alice/shared"]
	s.HoldKey = "bob"
	s.Hold = func(ctx context.Context) (context.Context, func(), error) {
		holds.Add(1)
		mctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, move, err := g.Hold(mctx, "bob", "carol", true)
		cancel()
		if err != nil {
			movesRefused.Add(1)
		} else {
			move()
		}
		return g.Hold(ctx, "bob", "alice", false)
	}
	h.sys.m["alice/shared"] = s
	h.sys.mu.Unlock()
	got := copyToShared(t, h, a, 40)
	if got.Status != StatusSucceeded || got.FilesDone != 40 {
		t.Fatalf("transfer: %s, %d files done, %s", got.Status, got.FilesDone, got.Error)
	}
	// 41 items in chunks of 5: at least 9 holds for the round, besides planning.
	if n := holds.Load(); n < 10 {
		t.Fatalf("%d holds for 41 items in chunks of 5", n)
	}
	if n := movesRefused.Load(); n != 0 {
		t.Fatalf("%d of %d moves could not be had between the run's holds", n, holds.Load())
	}
}

// copyToShared copies a directory of n files of 4 KiB on a (alice's system "a") into a fresh
// directory through alice's system "shared" and returns the transfer once it has ended.
func copyToShared(t *testing.T, h *harness, a *sshtest.Server, n int) *Transfer {
	t.Helper()
	dir := a.MkTemp(t)
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := []string{dir, src}
	for i := range n {
		p := filepath.Join(src, fmt.Sprintf("f%02d", i))
		randomFile(t, p, 4096, uint64(i))
		paths = append(paths, p)
	}
	owned(t, a, paths...)
	tr := h.submit("alice", Request{Recursive: true, Source: Endpoint{System: "a", Path: src},
		Destination: Endpoint{System: "shared", Path: filepath.Join(dir, "dst")}})
	return h.wait("alice", tr.ID, time.Minute, func(t *Transfer) bool { return t.Status.Terminal() })
}

func TestChunks(t *testing.T) {
	items := func(sizes ...int64) []*Item {
		var out []*Item
		for _, s := range sizes {
			out = append(out, &Item{Size: s})
		}
		return out
	}
	for _, c := range []struct {
		sizes []int64
		n     int
		b     int64
		want  []int
	}{
		{nil, 3, 10, nil},
		{[]int64{1, 1, 1, 1, 1, 1, 1}, 3, 100, []int{3, 3, 1}},
		{[]int64{4, 4, 4, 4}, 10, 8, []int{2, 2}},
		{[]int64{1, 100, 1}, 10, 8, []int{1, 1, 1}},
		{[]int64{0, 0, 5, 5}, 10, 5, []int{3, 1}},
	} {
		var got []int
		for _, ch := range chunks(items(c.sizes...), c.n, c.b) {
			got = append(got, len(ch))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("chunks(%v, %d, %d) = %v, want %v", c.sizes, c.n, c.b, got, c.want)
		}
	}
}

// errGuardLost stands for the cause a lost guard gives its holders (guard.ErrLost).
var errGuardLost = errors.New("the guard on these shared files was lost")

// TestSharedRunLostHoldRetries: when a chunk's hold is lost (its context ends while the run's
// does not), the chunk's work stops without failing its items, and the run goes on under new
// holds, which judge the paths afresh: the transfer still succeeds.
func TestSharedRunLostHoldRetries(t *testing.T) {
	cfg := testConfig()
	cfg.SharedChunkItems = 5
	h := newHarness(t, cfg)
	a := sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "shared", a, "")
	var holds, lost atomic.Int64
	h.sys.mu.Lock()
	s := h.sys.m["alice/shared"]
	s.HoldKey = "bob"
	s.Hold = func(ctx context.Context) (context.Context, func(), error) {
		held, cancel := context.WithCancelCause(ctx)
		if holds.Add(1) == 2 { // the first chunk of the first round: lost at once
			lost.Add(1)
			cancel(errGuardLost)
		}
		return held, func() { cancel(nil) }, nil
	}
	h.sys.m["alice/shared"] = s
	h.sys.mu.Unlock()
	got := copyToShared(t, h, a, 12)
	if got.Status != StatusSucceeded || got.FilesDone != 12 || got.FilesFailed != 0 {
		t.Fatalf("transfer after a lost hold: %s, %d files done, %d failed, %s", got.Status, got.FilesDone, got.FilesFailed, got.Error)
	}
	if lost.Load() != 1 || holds.Load() < 5 { // setup, 3 chunks, and the lost chunk again
		t.Fatalf("%d holds, %d lost", holds.Load(), lost.Load())
	}
}
