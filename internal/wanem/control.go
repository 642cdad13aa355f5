package wanem

import (
	"fmt"
	"sync"
)

// SetRate changes the link's rate in both directions to rate bytes per second (0: unlimited)
// for the bytes read from now on, while connections stay open: a path that starts to trickle
// and later recovers. Bytes already on the emulated path keep their delivery times. Config still
// reports the rate the proxy was created with.
func (p *Proxy) SetRate(rate int64) error {
	if rate < 0 {
		return fmt.Errorf("wanem: rate %d must not be negative", rate)
	}
	p.up.setRate(rate)
	p.down.setRate(rate)
	return nil
}

// Blackhole stops the path until Restore: no byte is delivered in either direction and new
// connections are accepted but not forwarded to the upstream. Nothing is closed or reset, so
// only the endpoints' own timeouts and keepalives notice, as with a partition that heals.
// Bytes keep being read until the per-connection buffer is full.
func (p *Proxy) Blackhole() { p.gate.close() }

// Restore ends a Blackhole: held bytes are delivered (no earlier than their emulated times) and
// held connections are forwarded.
func (p *Proxy) Restore() { p.gate.open() }

// Blackholed reports whether the path is black-holed.
func (p *Proxy) Blackholed() bool { return p.gate.closed() }

// gate lets traffic pass while open; a closed gate holds everyone who waits on it.
type gate struct {
	mu   sync.Mutex
	pass chan struct{} // closed while the gate is open
}

func newGate() gate {
	ch := make(chan struct{})
	close(ch)
	return gate{pass: ch}
}

// wait blocks while the gate is closed; it reports false if done is closed first.
func (g *gate) wait(done <-chan struct{}) bool {
	g.mu.Lock()
	pass := g.pass
	g.mu.Unlock()
	select {
	case <-pass:
		return true
	case <-done:
		return false
	}
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.pass:
		g.pass = make(chan struct{})
	default:
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.pass:
	default:
		close(g.pass)
	}
}

func (g *gate) closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.pass:
		return false
	default:
		return true
	}
}
