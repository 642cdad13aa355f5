package transfer

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/wanem"
)

// TestOwnerRunningAndQueuedLimits: an owner's transfers beyond MaxRunningPerOwner stay queued
// without holding a worker, so another owner's transfer runs at once; beyond MaxQueuedPerOwner
// unfinished transfers, Submit refuses with ErrQuota.
func TestOwnerRunningAndQueuedLimits(t *testing.T) {
	cfg := testConfig()
	cfg.Workers, cfg.MaxRunningPerOwner, cfg.MaxQueuedPerOwner = 2, 1, 3
	h := newHarness(t, cfg)
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("bob", "slow", a, trickleProxy(t, a, 256<<10))
	h.sys.add("bob", "b", b, "")
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	randomFile(t, filepath.Join(srcDir, "big.bin"), 64<<20, 1)
	want := randomFile(t, filepath.Join(srcDir, "small.bin"), 1<<20, 2)
	var bobs []string
	for i := range 3 {
		tr := h.submit("bob", Request{Source: Endpoint{System: "slow", Path: filepath.Join(srcDir, "big.bin")},
			Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, fmt.Sprintf("bob%d", i))}, ChunkSize: 4 << 20})
		bobs = append(bobs, tr.ID)
	}
	_, _, err := h.eng.Submit(t.Context(), "bob", Request{Source: Endpoint{System: "slow", Path: filepath.Join(srcDir, "big.bin")},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "bob4")}})
	if !errors.Is(err, ErrQuota) {
		t.Fatalf("bob's 4th unfinished transfer: err = %v, want ErrQuota", err)
	}
	// bob's transfers: one runs, the others wait queued (and keep no worker).
	running := func() (n int) {
		for _, id := range bobs {
			tr, err := h.eng.Get(t.Context(), "bob", id)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Status == StatusRunning {
				n++
			}
		}
		return n
	}
	for running() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: filepath.Join(srcDir, "small.bin")},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "alice")}})
	deadline := time.Now().Add(time.Minute)
	for {
		if n := running(); n > 1 {
			t.Fatalf("%d of bob's transfers running at once; his limit is 1", n)
		}
		got, err := h.eng.Get(t.Context(), "alice", tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Terminal() {
			if got.Status != StatusSucceeded || fileSHA(t, filepath.Join(dstDir, "alice")) != want {
				t.Fatalf("alice's transfer: %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's transfer did not finish while bob's were limited: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range bobs {
		if _, err := h.eng.Cancel(t.Context(), "bob", id); err != nil {
			t.Fatal(err)
		}
	}
	// With bob's transfers finished (canceled), he may submit again.
	if _, _, err := h.eng.Submit(t.Context(), "bob", Request{Source: Endpoint{System: "b", Path: filepath.Join(dstDir, "alice")},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "bob-again")}}); err != nil {
		t.Fatalf("submit after cancel: %v", err)
	}
}

// TestSlowTransferRetriedThenFailed: a source that trickles bytes (a wanem link of 4 KiB/s) is
// slower than MinRate over MinRateWindow; the run goes back to the queue (worker released) and is
// retried on new channels SlowRetries times, then the transfer fails saying why.
func TestSlowTransferRetriedThenFailed(t *testing.T) {
	cfg := testConfig()
	cfg.MinRate, cfg.MinRateWindow, cfg.SlowRetries = 64<<10, 2*time.Second, 1
	h := newHarness(t, cfg)
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("bob", "trickle", a, trickleProxy(t, a, 4<<10))
	h.sys.add("bob", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	randomFile(t, filepath.Join(srcDir, "f"), 4<<20, 1)
	start := time.Now()
	tr := h.submit("bob", Request{Source: Endpoint{System: "trickle", Path: filepath.Join(srcDir, "f")},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "f")}, Streams: 1})
	tr = h.wait("bob", tr.ID, 40*time.Second, nil)
	if tr.Status != StatusFailed || !strings.Contains(tr.Error, "minimum") {
		t.Fatalf("status %s error %q, want failed below the minimum rate", tr.Status, tr.Error)
	}
	if n := testutil.ToFloat64(h.eng.metrics.runs.WithLabelValues("too_slow")); n != 1 {
		t.Fatalf("too-slow runs re-queued: %v, want 1 (SlowRetries)", n)
	}
	t.Logf("trickling transfer failed after %s: %s", time.Since(start).Round(time.Millisecond), tr.Error)
}

// TestSlowRunsSurviveRestart: the count of too-slow runs lives in the transfer database. With
// SlowRetries 1, a run that ends too slow is re-queued once; after the engine restarts (a new
// process on the same database), the next slow run fails the transfer instead of being re-queued
// again, as the first engine would have done.
func TestSlowRunsSurviveRestart(t *testing.T) {
	cfg := testConfig()
	cfg.MinRate, cfg.MinRateWindow, cfg.SlowRetries = 64<<10, 2*time.Second, 1
	h := newHarness(t, cfg)
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("bob", "trickle", a, trickleProxy(t, a, 4<<10))
	h.sys.add("bob", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	randomFile(t, filepath.Join(srcDir, "f"), 4<<20, 1)
	tr := h.submit("bob", Request{Source: Endpoint{System: "trickle", Path: filepath.Join(srcDir, "f")},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "f")}, Streams: 1})
	h.wait("bob", tr.ID, 40*time.Second, func(tr *Transfer) bool { return tr.slowRuns == 1 })
	h.stop()
	h.start()
	tr = h.wait("bob", tr.ID, 40*time.Second, nil)
	if tr.Status != StatusFailed || !strings.Contains(tr.Error, "minimum") {
		t.Fatalf("status %s error %q, want failed below the minimum rate", tr.Status, tr.Error)
	}
	if n := testutil.ToFloat64(h.eng.metrics.runs.WithLabelValues("too_slow")); n != 0 {
		t.Fatalf("the restarted engine re-queued %v slow runs, want 0 (the first engine used the one retry)", n)
	}
	if tr.slowRuns != 2 {
		t.Fatalf("slow runs %d, want 2", tr.slowRuns)
	}
}

// trickleProxy puts a link of rate bytes/s with a small buffer in front of srv: what a closed
// connection left queued drains quickly, as on a real path, so a new connection gets through.
func trickleProxy(t *testing.T, srv *sshtest.Server, rate int64) string {
	t.Helper()
	p, err := wanem.New(wanem.Config{Upstream: srv.Addr, Rate: rate, Buffer: max(rate/4, 32<<10)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p.Addr().String()
}
