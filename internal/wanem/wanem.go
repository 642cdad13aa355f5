// Package wanem is a user-space wide-area-network emulator: a TCP proxy that puts an emulated
// long, fat network path (a fixed round-trip time and a bandwidth cap shared by every
// connection, like one physical link) between its clients and one upstream address.
//
// The kernels sshapi is developed on have no netem qdisc, so tests and benchmarks put this proxy
// in front of a loopback sshd to show that one SSH channel moves at most its 2 MiB window per
// round trip and that striping a transfer over many channels fills the pipe.
//
// Each direction of each connection is a reader goroutine that stamps every chunk it reads
// with the time it may be delivered (serialization on the shared link, then RTT/2 of
// propagation) and a writer goroutine that writes chunks no earlier than that time, in order.
// The bytes held per direction are bounded, so when the emulated path is full the proxy stops
// reading and the sender feels backpressure. Half-close (FIN) and resets are forwarded after the
// same delay as the data before them.
package wanem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// minBuffer is the smallest default per-direction buffer.
	minBuffer = 4 << 20
	// assumedRate sizes the default buffer when the rate is unlimited (1 Gbit/s).
	assumedRate = 125_000_000
	// dialTimeout bounds connecting to the upstream.
	dialTimeout = 10 * time.Second
)

// Config describes the emulated path and the two endpoints of the proxy.
type Config struct {
	// Listen is the TCP address the proxy accepts clients on; "127.0.0.1:0" (the default when
	// empty) picks a free loopback port, see Proxy.Addr.
	Listen string
	// Upstream is the TCP address every accepted connection is forwarded to.
	Upstream string
	// RTT is the emulated round-trip time: each direction delays every byte by RTT/2.
	RTT time.Duration
	// Rate is the link's serialization rate in bytes per second per direction, shared by all
	// connections through the proxy; 0 means unlimited. ParseRate converts "1gbit" and friends.
	Rate int64
	// Buffer bounds the bytes the proxy holds per direction of each connection (queued for the
	// link plus in flight on the emulated wire). 0 picks max(2×Rate×RTT, 4 MiB), sizing for
	// 1 Gbit/s when Rate is 0. A single connection cannot exceed Buffer per RTT/2.
	Buffer int64
	// Log receives per-connection diagnostics such as failed upstream dials; nil discards them.
	Log *slog.Logger
}

// Stats is a snapshot of what a Proxy has forwarded.
type Stats struct {
	// ToUpstream is the number of bytes written to upstream connections.
	ToUpstream int64
	// ToClient is the number of bytes written back to clients.
	ToClient int64
	// Active is the number of client connections currently open through the proxy.
	Active int
	// Accepted is the number of client connections accepted since Start.
	Accepted int64
}

// proxyState is where a Proxy is in its life cycle.
type proxyState int

const (
	stateNew proxyState = iota
	stateStarted
	stateStopped
)

// Proxy is a TCP proxy that emulates a WAN path between its clients and Config.Upstream.
// Create it with New, then Start it; Stop releases everything it owns.
type Proxy struct {
	cfg   Config
	log   *slog.Logger
	pools pools
	// up and down are the two directions of the shared emulated link.
	up, down link
	// gate holds every byte and upstream dial while the path is black-holed (control.go).
	gate gate

	toUpstream, toClient, accepted atomic.Int64

	mu     sync.Mutex
	state  proxyState
	ln     *net.TCPListener
	conns  map[*conn]struct{}
	ctx    context.Context // canceled by Stop; bounds upstream dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection handler
}

// New validates cfg, fills in defaults and returns a Proxy that is not yet listening.
func New(cfg Config) (*Proxy, error) {
	switch {
	case cfg.Upstream == "":
		return nil, errors.New("wanem: upstream address is required")
	case cfg.RTT < 0:
		return nil, fmt.Errorf("wanem: rtt %v must not be negative", cfg.RTT)
	case cfg.Rate < 0:
		return nil, fmt.Errorf("wanem: rate %d must not be negative", cfg.Rate)
	case cfg.Buffer < 0:
		return nil, fmt.Errorf("wanem: buffer %d must not be negative", cfg.Buffer)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = defaultBuffer(cfg.Rate, cfg.RTT)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		cfg:   cfg,
		log:   log,
		pools: newPools(),
		gate:  newGate(),
		conns: make(map[*conn]struct{}),
	}
	p.up.rate.Store(cfg.Rate)
	p.down.rate.Store(cfg.Rate)
	return p, nil
}

// defaultBuffer is twice the bandwidth-delay product, at least minBuffer.
func defaultBuffer(rate int64, rtt time.Duration) int64 {
	if rate == 0 {
		rate = assumedRate
	}
	b := 2 * float64(rate) * rtt.Seconds()
	if b < minBuffer {
		return minBuffer
	}
	return int64(b)
}

// chunkSize is the largest read per direction: about one millisecond of the link's time, so
// store-and-forward of a chunk adds little latency, between 4 KiB and bigBuf, and no more than
// the buffer.
func chunkSize(rate, buffer int64) int {
	c := int64(bigBuf)
	if rate > 0 {
		c = min(max(rate/1000, 4<<10), bigBuf)
	}
	return int(min(c, buffer))
}

// Config returns the effective configuration, with defaults filled in.
func (p *Proxy) Config() Config { return p.cfg }

// Start listens on Config.Listen and serves connections in the background until Stop. ctx
// bounds only the listen call; stop the proxy with Stop.
func (p *Proxy) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != stateNew {
		return errors.New("wanem: proxy already started or stopped")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("wanem: listen: %w", err)
	}
	p.ln = ln.(*net.TCPListener)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.state = stateStarted
	p.wg.Go(p.acceptLoop)
	return nil
}

// Addr returns the address the proxy listens on, or nil before Start.
func (p *Proxy) Addr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Stop closes the listener and every connection, discarding data still on the emulated path,
// and waits for all of the proxy's goroutines to exit. It is safe to call more than once.
func (p *Proxy) Stop() error {
	p.mu.Lock()
	if p.state != stateStarted {
		p.state = stateStopped
		p.mu.Unlock()
		return nil
	}
	p.state = stateStopped
	p.cancel()
	err := p.ln.Close()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("wanem: close listener: %w", err)
	}
	return nil
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := len(p.conns)
	p.mu.Unlock()
	return Stats{
		ToUpstream: p.toUpstream.Load(),
		ToClient:   p.toClient.Load(),
		Active:     active,
		Accepted:   p.accepted.Load(),
	}
}

// acceptLoop accepts clients until the listener is closed.
func (p *Proxy) acceptLoop() {
	backoff := time.NewTimer(0)
	backoff.Stop()
	for {
		tc, err := p.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Typically EMFILE: wait a little instead of spinning.
			p.log.Warn("wanem: accept failed", "err", err)
			backoff.Reset(50 * time.Millisecond)
			select {
			case <-backoff.C:
			case <-p.ctx.Done():
				return
			}
			continue
		}
		p.accepted.Add(1)
		c := &conn{client: tc, done: make(chan struct{})}
		p.mu.Lock()
		if p.state != stateStarted {
			p.mu.Unlock()
			_ = tc.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Go(func() { p.serve(c) })
		p.mu.Unlock()
	}
}

// serve runs one client connection: it starts reading from the client at once, connects to
// the upstream RTT/2 later (when the client's first bytes would arrive there), then relays
// both directions until both are finished or one fails.
func (p *Proxy) serve(c *conn) {
	defer func() {
		c.wg.Wait()
		c.close(false)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	delay := p.cfg.RTT / 2
	up := p.newPipe(c, c.client, &p.up, &p.toUpstream)
	c.wg.Go(up.read)

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return
		}
	}
	if !p.gate.wait(c.done) { // black-holed: the connection is not forwarded yet
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(p.ctx, "tcp", p.cfg.Upstream)
	if err != nil {
		if p.ctx.Err() == nil { // not just Stop interrupting the dial
			p.log.Warn("wanem: dial upstream", "upstream", p.cfg.Upstream, "err", err)
		}
		c.close(true)
		return
	}
	u := nc.(*net.TCPConn)
	if !c.setUpstream(u) {
		_ = u.Close()
		return
	}
	up.dst = u
	down := p.newPipe(c, u, &p.down, &p.toClient)
	down.dst = c.client
	c.wg.Go(up.write)
	c.wg.Go(down.read)
	c.wg.Go(down.write)
}

// conn is one client connection and its upstream connection.
type conn struct {
	client *net.TCPConn
	done   chan struct{} // closed by close
	wg     sync.WaitGroup

	mu       sync.Mutex
	upstream *net.TCPConn
	closed   bool
}

// setUpstream records the upstream connection; it reports false if c is already closed.
func (c *conn) setUpstream(u *net.TCPConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.upstream = u
	return true
}

// close closes both sockets, with a reset (SO_LINGER 0) if reset is set, and tells the
// connection's goroutines to exit.
func (c *conn) close(reset bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	for _, tc := range []*net.TCPConn{c.client, c.upstream} {
		if tc == nil {
			continue
		}
		if reset {
			_ = tc.SetLinger(0)
		}
		_ = tc.Close()
	}
}

// Run starts a proxy for cfg, logs its bound address and blocks until ctx is done, then stops
// the proxy. It is the body of the "sshapi wanem" subcommand. log may be nil.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Log == nil {
		cfg.Log = log
	}
	p, err := New(cfg)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	eff := p.Config()
	log.Info("wanem listening", "addr", p.Addr().String(), "upstream", eff.Upstream,
		"rtt", eff.RTT, "rate_bytes_per_sec", eff.Rate, "buffer_bytes", eff.Buffer)
	<-ctx.Done()
	err = p.Stop()
	st := p.Stats()
	log.Info("wanem stopped", "accepted", st.Accepted, "to_upstream_bytes", st.ToUpstream,
		"to_client_bytes", st.ToClient)
	return err
}
