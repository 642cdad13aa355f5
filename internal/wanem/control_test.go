package wanem

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestSetRate slows an open connection down to a trickle and back: at 64 KiB/s, 256 KiB cannot
// arrive in less than about 4 s (the lower bound is the contract; a loaded machine only makes
// it slower), and after SetRate(0) the same connection moves 8 MiB without a trickle's delay.
func TestSetRate(t *testing.T) {
	up := startServer(t, echo)
	p := startProxy(t, Config{Upstream: up, Buffer: 256 << 10})
	c := dial(t, p.Addr().String())
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	roundTrip := func(n int) time.Duration {
		t.Helper()
		start := time.Now()
		errc := make(chan error, 1)
		go func() { _, err := c.Write(make([]byte, n)); errc <- err }()
		if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
			t.Fatalf("read back %d bytes: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	roundTrip(64 << 10) // the upstream connection is up
	if err := p.SetRate(64 << 10); err != nil {
		t.Fatal(err)
	}
	if d := roundTrip(256 << 10); d < 3500*time.Millisecond {
		t.Errorf("256 KiB echoed in %v at 64 KiB/s: the trickle is not applied", d)
	} else {
		t.Logf("trickle: 256 KiB echoed in %v", d)
	}
	if err := p.SetRate(0); err != nil {
		t.Fatal(err)
	}
	// 8 MiB at the trickle would take over two minutes: the deadline above fails the test then.
	d := roundTrip(8 << 20)
	t.Logf("restored: 8 MiB echoed in %v", d)
	if err := p.SetRate(-1); err == nil {
		t.Error("SetRate(-1) accepted")
	}
}

// TestBlackhole holds an open connection's bytes and a new connection's upstream dial while the
// path is black-holed, closes and resets nothing, and delivers both after Restore.
func TestBlackhole(t *testing.T) {
	var accepted atomic.Int64
	up := startServer(t, func(c *net.TCPConn) { accepted.Add(1); echo(c) })
	p := startProxy(t, Config{Upstream: up})
	old := dial(t, p.Addr().String())
	if _, err := old.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(old, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	if !p.Blackholed() {
		t.Fatal("Blackholed() false after Blackhole")
	}
	if _, err := old.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	fresh := dial(t, p.Addr().String()) // accepted by the proxy, not forwarded
	if _, err := fresh.Write([]byte("new!")); err != nil {
		t.Fatal(err)
	}
	// Nothing may come back while the path is black-holed (a bounded wait for something that
	// must not happen).
	_ = old.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := old.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes (%v) through a black hole", n, err)
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("upstream accepted %d connections during the black hole, want only the first", n)
	}
	p.Restore()
	for _, c := range []*net.TCPConn{old, fresh} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("after Restore: %v", err)
		}
		if s := string(buf); s != "held" && s != "new!" {
			t.Fatalf("after Restore: got %q", s)
		}
	}
	if p.Blackholed() || accepted.Load() != 2 {
		t.Fatalf("after Restore: blackholed %v, upstream accepted %d", p.Blackholed(), accepted.Load())
	}
}
