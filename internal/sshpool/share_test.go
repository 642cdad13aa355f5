package sshpool

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshtest"
)

func ownedTarget(t *testing.T, srv *sshtest.Server, owner, name string, signer ssh.Signer) Target {
	tg := target(t, srv, owner+"/"+name, signer)
	tg.Key.Owner = owner
	return tg
}

// TestOwnerShareOfHostConnections: an owner that keeps every one of its connections busy gets no
// more than its share of the host's connections, and another owner still gets one.
func TestOwnerShareOfHostConnections(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{MaxConnsPerHost: 4, MaxConnsPerOwnerHost: 2})
	a := ownedTarget(t, srv, "alice", "hpc", srv.Signer)
	a.MaxSessions = 3 // one slot per connection
	var held []*Session
	for range 2 {
		s, err := p.NewSession(t.Context(), a)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := p.NewSession(ctx, a); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("alice's third session beyond her share: err = %v, want ErrUnavailable", err)
	}
	p.mu.Lock()
	h := p.hosts[srv.Addr]
	conns, aliceConns := h.conns, h.owners["alice"].conns
	p.mu.Unlock()
	if conns != 2 || aliceConns != 2 {
		t.Fatalf("host conns %d, alice's %d; want 2 and 2 (her share)", conns, aliceConns)
	}
	b := ownedTarget(t, srv, "bob", "hpc", srv.Signer)
	if _, err := run(t.Context(), p, b, "true"); err != nil {
		t.Fatalf("bob on a host where alice holds her full share: %v", err)
	}
	for _, s := range held {
		s.Close()
	}
	// Released slots serve alice again.
	if _, err := run(t.Context(), p, a, "true"); err != nil {
		t.Fatal(err)
	}
}

// TestFailingDialsHoldOnlyTheOwnersDialShare: one owner's 50 concurrent credential checks whose
// dials each take long and fail (here: a host key check that stalls, then refuses) hold at most
// MaxDialsPerOwnerHost of the host's dial slots, so another owner's first command on a cold pool
// still dials. Each check honours its own deadline while it waits.
func TestFailingDialsHoldOnlyTheOwnersDialShare(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{MaxDialsPerHost: 3}) // owner share: 2
	junk := ownedTarget(t, srv, "bob", "victim", newSigner(t))
	var inFlight, peak, dials atomic.Int64
	junk.Config.HostKeyCallback = func(string, net.Addr, ssh.PublicKey) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := peak.Load()
			if n <= m || peak.CompareAndSwap(m, n) {
				break
			}
		}
		dials.Add(1)
		time.Sleep(300 * time.Millisecond) // a slow server that then fails
		return errors.New("stalling host")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var unavailable atomic.Int64
	for range 50 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				if err := p.Check(ctx, junk); errors.Is(err, ErrUnavailable) {
					unavailable.Add(1)
				}
				cancel()
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	// Wait until bob's checks hold his share of the dial slots.
	for peak.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	var worst time.Duration
	for i := range 3 {
		a := ownedTarget(t, srv, "alice", "hpc", srv.Signer)
		a.Key.Credential += string(rune('a' + i)) // a cold key each time
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		start := time.Now()
		_, err := run(ctx, p, a, "true")
		cancel()
		if err != nil {
			t.Fatalf("alice's first command while bob's checks fail: %v", err)
		}
		worst = max(worst, time.Since(start))
	}
	t.Logf("alice's first command on a cold key: worst %v while bob's 50 failing checks ran (%d dials)", worst, dials.Load())
	if got := peak.Load(); got > 2 {
		t.Fatalf("bob had %d dials in flight at once; his share is 2", got)
	}
	for unavailable.Load() == 0 { // checks waiting for bob's slots give up at their deadline
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFailedLoginsBackOffPerOwner: an owner whose logins keep failing on a host dials there at a
// slowing pace (250ms, 500ms, 1s, … after each failure, at most MaxDialsPerOwnerHost at once),
// whatever the number of concurrent checks; checks waiting out the pause end at their deadline;
// another owner is not slowed.
func TestFailedLoginsBackOffPerOwner(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{AuthFailBackoffMax: time.Second})
	junk := ownedTarget(t, srv, "bob", "victim", newSigner(t))
	failed := func() float64 { return testutil.ToFloat64(p.metrics.dials.WithLabelValues("auth_failed")) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var unavailable atomic.Int64
	start := time.Now()
	for range 10 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				if err := p.Check(ctx, junk); errors.Is(err, ErrUnavailable) {
					unavailable.Add(1)
				}
				cancel()
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for failed() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	a := ownedTarget(t, srv, "alice", "hpc", srv.Signer)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := p.Check(ctx, a); err != nil {
		t.Fatalf("alice's check while bob's logins fail: %v", err)
	}
	for failed() < 6 {
		time.Sleep(5 * time.Millisecond)
	}
	// Bob dials at most two at a time (his dial share), so failures come in pairs; pauses of
	// at least 500ms and 1s separate his first three pairs (without the backoff: ~100ms in all).
	if el := time.Since(start); el < 1200*time.Millisecond {
		t.Fatalf("bob's 10 check loops made 6 failed logins in %v; the backoff should space them over at least 1.5s", el)
	}
	if unavailable.Load() == 0 {
		t.Fatal("no check gave up at its deadline while waiting out the backoff")
	}
}
