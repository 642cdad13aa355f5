package transfer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	s.Hold = func(context.Context) (func(), error) {
		calls.Add(1)
		if busy.Load() && calls.Load() > 1 { // setup gets it; the rounds wait
			return nil, errHeld
		}
		held.Add(1)
		return func() { held.Add(-1) }, nil
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
