package sshpool

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestUnusedHostStatesDropped: the pool's per-address state (its dial slots and each owner's
// share) goes once nothing uses it, so the addresses users name (each system's host:port, any
// of them unreachable) do not pile up in the pool for the life of the process. A host with a
// live connection, or an owner's failed-login backoff still running, keeps its state; a dropped
// one is made again at the next dial.
func TestUnusedHostStatesDropped(t *testing.T) {
	const unreachable = 20
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{IdleTimeout: time.Minute})
	good := target(t, srv, "good", srv.Signer)
	if _, err := run(t.Context(), p, good, "true"); err != nil {
		t.Fatal(err)
	}
	bad := target(t, srv, "bad", newSigner(t))
	_, port, _ := net.SplitHostPort(srv.Addr)
	bad.Addr = net.JoinHostPort("localhost", port) // the same sshd under another address
	if _, err := run(t.Context(), p, bad, "true"); !errors.Is(err, ErrAuth) {
		t.Fatalf("unauthorized key: %v, want ErrAuth", err)
	}
	backoff := func(until time.Time) { // the bad key's owner's failed-login backoff on its address
		p.mu.Lock()
		defer p.mu.Unlock()
		p.hosts[bad.Addr].owners[bad.Key.owner()].authUntil = until
	}
	backoff(time.Now().Add(time.Hour))
	for i := range unreachable { // ports nobody listens on: every dial is refused
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		tg := target(t, srv, "gone"+addr, srv.Signer)
		tg.Addr = addr
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		if _, err := run(ctx, p, tg, "true"); err == nil {
			t.Fatalf("dial %d to closed %s succeeded", i, addr)
		}
		cancel()
	}
	hosts := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.hosts)
	}
	awaitPool(t, "the refused dials to end", func() bool { return p.Stats().Dialing == 0 })
	if n := hosts(); n != unreachable+2 {
		t.Fatalf("%d host states before eviction, want %d", n, unreachable+2)
	}
	// The connection to srv keeps srv's state, the running backoff the bad key's address's.
	p.evictIdle(time.Now())
	if n := hosts(); n != 2 {
		t.Fatalf("%d host states after eviction, want 2 (a live connection, a running backoff)", n)
	}
	backoff(time.Now().Add(-time.Second))
	p.evictIdle(time.Now())
	if n := hosts(); n != 1 {
		t.Fatalf("%d host states once the backoff ran out, want 1", n)
	}
	if st := p.Stats(); st.Conns != 1 {
		t.Fatalf("the live connection was evicted: %+v", st)
	}
	p.evictIdle(time.Now().Add(2 * time.Minute))
	if n, st := hosts(), p.Stats(); n != 0 || st.Conns != 0 {
		t.Fatalf("after the idle connection closed: %d host states, %+v; want none", n, st)
	}
	if _, err := run(t.Context(), p, good, "true"); err != nil {
		t.Fatalf("dial after its host state was dropped: %v", err)
	}
	if n := hosts(); n != 1 {
		t.Fatalf("%d host states after a new dial, want 1", n)
	}
}
