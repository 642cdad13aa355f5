package sshpool

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// bulkByConn is the bulk channel count of each of the key's connections.
func bulkByConn(p *Pool, tg Target) map[*conn]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[*conn]int{}
	for _, c := range p.keys[tg.Key].conns {
		out[c] = c.bulk
	}
	return out
}

// TestStripeSpreadsOverConnections: a striped transfer's further channels each get a connection
// of their own (dialed for them) up to max_conns_per_key, then share the connection with the
// fewest file channels; a stripe channel whose dial fails shares an existing connection instead
// of waiting; closing the leases gives every bulk count back.
func TestStripeSpreadsOverConnections(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	t.Run("spread then share", func(t *testing.T) {
		p, _ := newPool(t, Config{MaxConnsPerKey: 3})
		tg := target(t, srv, "spread", srv.Signer)
		first, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		var leases []*SFTPLease
		for range 3 {
			l, err := p.StripeSFTP(ctx, tg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Getwd(); err != nil { // the channel works
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
		if leases[0].c == first.c || leases[1].c == first.c || leases[0].c == leases[1].c {
			t.Fatal("the first two stripe channels did not each get a connection of their own")
		}
		got := bulkByConn(p, tg)
		if len(got) != 3 {
			t.Fatalf("%d connections, want max_conns_per_key 3", len(got))
		}
		counts := map[int]int{}
		for _, n := range got {
			counts[n]++
		}
		if counts[2] != 1 || counts[1] != 2 {
			t.Fatalf("bulk channels per connection %v, want one connection with 2 and two with 1", got)
		}
		for _, l := range append(leases, first) {
			_ = l.Close()
		}
		for c, n := range bulkByConn(p, tg) {
			if n != 0 || c.inUse != 0 {
				t.Fatalf("after close: bulk %d inUse %d", n, c.inUse)
			}
		}
	})

	t.Run("failed dial shares", func(t *testing.T) {
		p, _ := newPool(t, Config{})
		tg := target(t, srv, "fallback", srv.Signer)
		first, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, then hangs up: every dial fails
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		bad := tg
		bad.Addr = ln.Addr().String()
		l, err := p.StripeSFTP(ctx, bad)
		if err != nil {
			t.Fatalf("stripe channel after a failed dial: %v", err)
		}
		defer l.Close()
		if l.c != first.c {
			t.Fatal("the stripe channel is not on the existing connection")
		}
	})
}

// TestRefusedOpenGoesElsewhere: when the server refuses a channel open on the busiest connection
// (here its MaxSessions 2 is below what the target claims), the retry is placed on another
// connection with room instead of on the same one again: four sessions held at once on two
// connections all open (packing alone retried the refusing connection until the deadline).
func TestRefusedOpenGoesElsewhere(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{ExtraConfig: "MaxSessions 2"})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	p, _ := newPool(t, Config{MaxConnsPerKey: 2})
	tg := target(t, srv, "refused", srv.Signer) // claims MaxSessions 10: 8 slots per connection
	for range 2 {
		if err := p.Check(ctx, tg); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Stats().Conns; n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	for i := range 4 {
		s, err := p.NewSession(ctx, tg)
		if err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		defer s.Close()
		if err := s.Start("sleep 30"); err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
	}
	if n := testutil.ToFloat64(p.metrics.openRetries); n < 1 {
		t.Errorf("%g refused opens retried, want at least one (the test's premise)", n)
	}
}

// TestRefusedConnServesWaitersWhenBackoffEnds: a connection the server refused an open on takes
// no channel for its backoff; a channel waiting for it gets it when the backoff ends, though
// nothing else happens on the pool (no channel ends, no connection can be dialed: before the
// backoff had a timer, the waiter stayed until its deadline).
func TestRefusedConnServesWaitersWhenBackoffEnds(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{MaxConnsPerKey: 1})
	tg := target(t, srv, "backoff", srv.Signer)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := p.Check(ctx, tg); err != nil {
		t.Fatal(err)
	}
	c, err := p.acquire(ctx, tg, placeControl)
	if err != nil {
		t.Fatal(err)
	}
	p.releaseRefused(c, placeControl, 100*time.Millisecond) // as openChannel does on a refusal
	got, err := p.acquire(ctx, tg, placeControl)
	if err != nil {
		t.Fatalf("waiting for the refused connection: %v", err)
	}
	if got != c {
		t.Fatal("granted another connection than the only one")
	}
	p.release(got, placeControl)
}
