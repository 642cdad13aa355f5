package sshpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// Session is an exec channel lent by the pool. Close it to give the slot back.
type Session struct {
	*ssh.Session
	p    *Pool
	c    *conn
	once sync.Once
}

// Close closes the channel and returns its slot to the pool.
func (s *Session) Close() error {
	var err error
	s.once.Do(func() {
		err = s.Session.Close()
		s.p.release(s.c, placeControl)
	})
	return err
}

// NewSession lends a fresh session channel for one command. Refused opens ("open failed" when the
// server's MaxSessions is reached while earlier channels are still closing) are retried with
// jittered backoff; an open that fails because the connection died is retried on another
// connection. Nothing has run on the server when NewSession returns an error.
func (p *Pool) NewSession(ctx context.Context, t Target) (*Session, error) {
	ch, c, err := p.openChannel(ctx, t, placeControl, func(c *ssh.Client) (any, error) { return c.NewSession() })
	if err != nil {
		return nil, err
	}
	return &Session{Session: ch.(*ssh.Session), p: p, c: c}, nil
}

// SFTPLease is a dedicated SFTP channel lent by the pool, for bulk data where one shared
// channel's 2 MiB window would be the bottleneck. Close it to give the slot back.
type SFTPLease struct {
	*sftp.Client
	p     *Pool
	c     *conn
	ch    *dataChan
	place placement
	once  sync.Once
}

// Close ends the lease and returns its slot. The channel itself stays open for the next
// borrower: the connection's shared SFTP channel it was lent as (see takeSharedLocked) is that
// again where the connection has none (reshareLocked); any other is kept idle for the next lease
// of the same key where the pool keeps it (see SFTPIdlePerConn). The caller must have closed its
// files and have no request in flight.
func (l *SFTPLease) Close() error {
	var err error
	l.once.Do(func() {
		l.p.mu.Lock()
		kept := l.p.reshareLocked(l.c, l.ch, l.place) || l.p.parkLocked(l.c, l.ch, l.place)
		l.p.mu.Unlock()
		if kept {
			return
		}
		err = l.Client.Close()
		l.p.release(l.c, l.place)
	})
	return err
}

// Abort ends the lease by closing the SSH connection under it, for a channel stuck behind a
// peer that sends too slowly (an orderly close would wait until the peer's queued data drained).
// Other channels on that connection fail too; the pool dials a new one when needed.
func (l *SFTPLease) Abort() {
	l.p.mu.Lock()
	l.p.killLocked(l.c)
	l.p.serveWaitersLocked(l.c.kp)
	l.p.mu.Unlock()
	_ = l.c.client.Close() // unblocks the SFTP client's reads, so Close returns
	_ = l.Close()
}

// DedicatedSFTP lends an SFTP channel that only the caller uses, on a pooled connection: an
// idle one of t's key, or the shared one of a connection nobody borrows at the moment (see
// takeSharedLocked), or else a new one (packed onto the busiest connection with room).
func (p *Pool) DedicatedSFTP(ctx context.Context, t Target) (*SFTPLease, error) {
	return p.dedicatedSFTP(ctx, t, placeBulk)
}

// StripeSFTP opens a dedicated SFTP channel for one further part of a striped or multi-stream
// transfer, on a connection that carries no other file data: an existing one, or one dialed for
// it within max_conns_per_key and the host's and owner's shares. Where no such connection can
// be had (limits reached, or the dial failed) it shares the connection carrying the fewest file
// channels. Callers open several at once and use each as it arrives.
func (p *Pool) StripeSFTP(ctx context.Context, t Target) (*SFTPLease, error) {
	return p.dedicatedSFTP(ctx, t, placeSpread)
}

// dedicatedSFTP lends an idle data channel of t's key placed by pl, or opens a new one.
func (p *Pool) dedicatedSFTP(ctx context.Context, t Target, pl placement) (*SFTPLease, error) {
	p.mu.Lock()
	var c *conn
	var dc *dataChan
	if kp := p.keys[t.Key]; kp != nil && !p.closing && kp.authErr == nil {
		if c, dc = kp.takeIdleLocked(pl); dc == nil {
			c, dc = kp.takeSharedLocked(pl)
		}
	}
	p.mu.Unlock()
	if dc != nil {
		return &SFTPLease{Client: dc.cl, p: p, c: c, ch: dc, place: pl}, nil
	}
	ch, c, err := p.openChannel(ctx, t, pl, func(c *ssh.Client) (any, error) { return p.newSFTP(c) })
	if err != nil {
		return nil, err
	}
	cl := ch.(*sftp.Client)
	return &SFTPLease{Client: cl, p: p, c: c, ch: &dataChan{cl: cl}, place: pl}, nil
}

// SFTP request sizes. pkg/sftp reads and writes at most one packet's worth of data per request;
// OpenSSH's own sftp client sizes its requests from the server's limits@openssh.com reply, which
// for every OpenSSH sftp-server that has the extension (8.7 and later) is a read of 261,120
// bytes (SFTP_MAX_READ_LENGTH) and a message of 256 KiB. Older servers cut a longer read short
// (OpenSSH before 8.7 at 64 KiB), which pkg/sftp would take for the end of the file, so the large
// size is used only with a server that has the extension; others get the 32 KiB every SFTP
// server must accept.
const (
	smallSFTPPacket = 32 << 10
	largeSFTPPacket = 256<<10 - 1024
	// sftpInflightBytes is what one file's pipelined requests may carry when
	// Config.SFTPMaxInflight is not set: 64 requests of 32 KiB, one SSH channel window.
	sftpInflightBytes = 64 * smallSFTPPacket
)

// sftpPacketFor is the SFTP packet size for a server that announced itself as serverVersion
// (the SSH identification string) and whose sftp-server does (hasLimits) or does not offer
// limits@openssh.com.
func sftpPacketFor(serverVersion string, hasLimits bool) int {
	if hasLimits && strings.HasPrefix(serverVersion, "SSH-2.0-OpenSSH_") {
		return largeSFTPPacket
	}
	return smallSFTPPacket
}

// newSFTP starts an SFTP client on sc. With Config.SFTPMaxPacket set it uses that size;
// otherwise it starts one with the large size on an OpenSSH server and keeps it if the
// sftp-server offers limits@openssh.com (see largeSFTPPacket), or else closes it and starts one
// with the small size. The wire remembers the answer for the connection's later channels.
func (p *Pool) newSFTP(sc *ssh.Client) (*sftp.Client, error) {
	if w := wireOf(sc); w != nil && w.rtt.Load() == 0 {
		// The connection's first SFTP channel also times one round trip beside its own three
		// (session, subsystem, version), for Pool.RTT; waiting for it costs nothing.
		var wg sync.WaitGroup
		wg.Go(func() { measureWireRTT(sc, w) })
		defer wg.Wait()
	}
	if p.cfg.SFTPMaxPacket > 0 {
		return startSFTP(sc, p.sftpOptions(p.cfg.SFTPMaxPacket)...)
	}
	w := wireOf(sc)
	known := 0
	if w != nil {
		known = int(w.sftpPacket.Load())
	}
	if known == 0 && sftpPacketFor(string(sc.ServerVersion()), true) == largeSFTPPacket {
		cl, err := startSFTP(sc, p.sftpOptions(largeSFTPPacket)...)
		if err != nil {
			return nil, err
		}
		_, has := cl.HasExtension("limits@openssh.com")
		known = sftpPacketFor(string(sc.ServerVersion()), has)
		if w != nil {
			w.sftpPacket.Store(int64(known))
		}
		if known == largeSFTPPacket {
			return cl, nil
		}
		_ = cl.Close() // started with a size this server may cut short
	}
	if known == 0 {
		known = smallSFTPPacket
	}
	return startSFTP(sc, p.sftpOptions(known)...)
}

// startSFTP starts an SFTP client with opts on a new session channel of sc, as sftp.NewClient
// does, but tells the server's refusal of the subsystem (ErrNoSFTP: nothing else on the
// connection is wrong) from a connection that failed, which sftp.NewClient reports alike. The
// channel's requests are refused and its stderr discarded, as sftp.NewClient leaves them.
func startSFTP(sc *ssh.Client, opts ...sftp.ClientOption) (*sftp.Client, error) {
	ch, reqs, err := sc.OpenChannel("session", nil)
	if err != nil {
		return nil, err
	}
	go ssh.DiscardRequests(reqs)                            // ends when the channel does
	go func() { _, _ = io.Copy(io.Discard, ch.Stderr()) }() // ends when the channel does
	ok, err := ch.SendRequest("subsystem", true, ssh.Marshal(struct{ Name string }{"sftp"}))
	if err == nil && !ok {
		err = ErrNoSFTP
	}
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("sftp subsystem: %w", err)
	}
	cl, err := sftp.NewClientPipe(ch, ch, opts...)
	if err != nil {
		_ = ch.Close()
		return nil, err
	}
	return cl, nil
}

// measureWireRTT times one global request that wants a reply (keepalive@openssh.com, which an
// OpenSSH server refuses at once, as for ServerAliveInterval) and records it on w if it is the
// shortest yet. A failed request records nothing.
func measureWireRTT(sc *ssh.Client, w *wire) {
	t0 := time.Now()
	if _, _, err := sc.SendRequest("keepalive@openssh.com", true, nil); err != nil {
		return
	}
	w.noteRTT(time.Since(t0))
}

// noteRTT records a round trip of d on w if it is the shortest yet.
func (w *wire) noteRTT(rtt time.Duration) {
	d := max(int64(rtt), 1)
	for {
		old := w.rtt.Load()
		if old != 0 && old <= d {
			return
		}
		if w.rtt.CompareAndSwap(old, d) {
			return
		}
	}
}

// sftpOptions are the client options for SFTP requests of packet bytes: Config.SFTPMaxInflight
// requests in flight per file, or as many as make sftpInflightBytes.
func (p *Pool) sftpOptions(packet int) []sftp.ClientOption {
	inflight := p.cfg.SFTPMaxInflight
	if inflight <= 0 {
		inflight = max(4, sftpInflightBytes/packet)
	}
	return []sftp.ClientOption{
		sftp.MaxPacketUnchecked(packet),
		sftp.MaxConcurrentRequestsPerFile(inflight),
		sftp.UseConcurrentWrites(true),
		sftp.UseConcurrentReads(true),
	}
}

// openChannel acquires a slot placed by pl and opens a channel on it with open, retrying
// refusals and dead connections within ctx's deadline. On success the slot stays lent to the
// returned channel.
func (p *Pool) openChannel(ctx context.Context, t Target, pl placement, open func(*ssh.Client) (any, error)) (any, *conn, error) {
	delay := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		c, err := p.acquire(ctx, t, pl)
		if err != nil {
			return nil, nil, err
		}
		ch, err := p.openBounded(c, open)
		if err == nil {
			return ch, c, nil
		}
		var oce *ssh.OpenChannelError
		switch {
		case errors.Is(err, ErrNoSFTP):
			p.release(c, pl)
			return nil, nil, fmt.Errorf("open SFTP channel to %s: %w", t.Key, err)
		case errors.As(err, &oce) && oce.Reason == ssh.ConnectionFailed:
			// MaxSessions reached on the server side: channels we closed are still closing.
			// Packing would place the next channels on this same connection; it is skipped
			// for the backoff instead, and this open retried after it (elsewhere, or here).
			// The first refusal is retried at once: the refusing connection has no room
			// until its backoff ends or one of its channels does, so the retry goes to another
			// connection with room, or waits for one of those (not a blind sleep first, which
			// cost 2.5-7.5 ms on about 3% of commands at 50 clients on a stock sshd).
			p.metrics.openRetries.Inc()
			p.releaseRefused(c, pl, 2*delay) // beyond the retry's sleep, at most 1.5 × delay
			if attempt == 0 {
				continue
			}
		case errors.As(err, &oce):
			p.release(c, pl)
			return nil, nil, fmt.Errorf("open channel to %s: %w", t.Key, err)
		default:
			// The connection is gone: the channel never opened, so trying elsewhere is safe.
			p.metrics.openRetries.Inc()
			p.mu.Lock()
			p.killLocked(c)
			p.mu.Unlock()
			p.release(c, pl)
		}
		select {
		case <-time.After(delay/2 + rand.N(delay)):
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w: could not open a channel to %s before the deadline (last error: %v): %w", ErrUnavailable, t.Key, err, ctx.Err())
		}
		delay = min(delay*2, p.cfg.MaxOpenRetryDelay)
	}
}

// errOpenTimeout: a channel open got no answer within Config.OpenTimeout.
var errOpenTimeout = errors.New("no answer to a channel open")

// openBounded runs open on c's client and gives up after Config.OpenTimeout. A live server
// answers a channel open at once, or refuses it ("open failed" at MaxSessions); one that stays
// silent is frozen or gone without the client noticing, or the open was lost by the client
// library (x/crypto/ssh drops an open that races the end of its connection, and it then waits
// forever). Keepalives cannot free such a waiter, and the open takes no context, so without this
// bound a request could hang for good. On the timeout the connection is closed, which ends a
// waiting open with an error, and the caller treats it as a dead connection; the open's
// goroutine, if the library never returns, is the only thing left behind, and a channel it
// returns late is closed.
func (p *Pool) openBounded(c *conn, open func(*ssh.Client) (any, error)) (any, error) {
	type result struct {
		ch  any
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, err := open(c.client)
		done <- result{ch, err}
	}()
	t := time.NewTimer(p.cfg.OpenTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.ch, r.err
	case <-t.C:
		_ = c.client.Close()
		go func() {
			if r := <-done; r.err == nil {
				if cl, ok := r.ch.(io.Closer); ok {
					_ = cl.Close()
				}
			}
		}()
		return nil, fmt.Errorf("%w within %s on a connection to %s: closed it", errOpenTimeout, p.cfg.OpenTimeout, c.kp.key)
	}
}

// SharedSFTP is the connection's long-lived SFTP client, shared by many concurrent borrowers
// (pkg/sftp clients are safe for concurrent use and pipeline requests). Call Done when finished,
// passing the operation's error so a broken connection is noticed.
type SharedSFTP struct {
	*sftp.Client
	p    *Pool
	c    *conn
	once sync.Once
}

// Done returns the borrow. If err looks like the connection broke, the connection is probed
// (keepalive with its own timeout) and discarded only if it does not answer: other requests share
// it, and an error that merely mentions EOF must not fail them.
func (s *SharedSFTP) Done(err error) {
	s.once.Do(func() {
		p, c := s.p, s.c
		p.mu.Lock()
		defer p.mu.Unlock()
		c.sftpUse--
		c.lastUsed = time.Now()
		if isConnBroken(err) && !c.dead && !p.closing {
			if c.sftp == s.Client {
				// Its channel failed under a request: lend it no more, so a retry opens a new
				// channel (and finds the connection dead, if it is) instead of failing on this
				// one before watchSFTP or the probe notice. As watchSFTP would, the slot returns.
				c.sftp, c.sftpCh = nil, nil
				c.slots++
				go s.Client.Close()
				p.serveWaitersLocked(c.kp)
			}
			p.wg.Add(1)
			go p.probeOrKill(c)
		}
		p.checkDrainedLocked()
	})
}

// probeOrKill discards c if it does not answer a keepalive.
func (p *Pool) probeOrKill(c *conn) {
	defer p.wg.Done()
	err := p.probe(c)
	if err == nil {
		return
	}
	p.log.Warn("ssh connection failed its liveness probe", "key", c.kp.key.String(), "err", err)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked(c)
	p.serveWaitersLocked(c.kp)
}

// SFTP borrows a connection's shared SFTP client for metadata operations and small reads and
// writes. The first borrower on a key opens the channel, which then permanently holds one of the
// connection's slots; concurrent borrowers wait for it rather than opening more.
func (p *Pool) SFTP(ctx context.Context, t Target) (*SharedSFTP, error) {
	for {
		s, pending := p.borrowShared(t)
		if s != nil {
			return s, nil
		}
		if pending != nil {
			select {
			case <-pending:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: waiting for an SFTP channel to %s: %w", ErrUnavailable, t.Key, ctx.Err())
			}
		}
		s, err := p.openShared(ctx, t)
		if s != nil || err != nil {
			return s, err
		}
	}
}

// openShared makes one of t's connections carry a shared SFTP channel. It returns (nil, nil) when
// the caller should look again.
func (p *Pool) openShared(ctx context.Context, t Target) (*SharedSFTP, error) {
	p.mu.Lock()
	kp := p.keyPoolLocked(t)
	if kp.sftpPending != nil {
		p.mu.Unlock()
		return nil, nil
	}
	pending := make(chan struct{})
	kp.sftpPending = pending
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		kp.sftpPending = nil
		p.mu.Unlock()
		close(pending)
	}()

	c, err := p.acquire(ctx, t, placeControl)
	if err != nil {
		return nil, err
	}
	ch, err := p.openBounded(c, func(sc *ssh.Client) (any, error) { return p.newSFTP(sc) })
	cl, _ := ch.(*sftp.Client)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		c.inUse--
		var oce *ssh.OpenChannelError
		if errors.Is(err, ErrNoSFTP) {
			p.serveWaitersLocked(c.kp)
			return nil, fmt.Errorf("open SFTP channel to %s: %w", t.Key, err)
		}
		if !errors.As(err, &oce) {
			p.killLocked(c) // the connection died: the next attempt dials
		}
		p.serveWaitersLocked(c.kp)
		if errors.As(err, &oce) && oce.Reason != ssh.ConnectionFailed {
			return nil, fmt.Errorf("open SFTP channel to %s: %w", t.Key, err)
		}
		p.metrics.openRetries.Inc()
		return nil, nil
	}
	if c.sftp != nil || c.dead { // lost a race with a connection change; keep the older client
		c.inUse--
		p.serveWaitersLocked(c.kp)
		go cl.Close()
		return nil, nil
	}
	// The slot now belongs to the SFTP channel for the connection's life (or until a dedicated
	// lease takes it while nobody borrows it: see takeSharedLocked).
	c.slots--
	c.inUse--
	c.sftpUse++
	p.makeSharedLocked(c, &dataChan{cl: cl})
	return &SharedSFTP{Client: cl, p: p, c: c}, nil
}

// makeSharedLocked makes ch c's shared SFTP channel, whose slot c.slots no longer counts, and
// watches it (once in its life) so that it is cleared when its channel ends.
func (p *Pool) makeSharedLocked(c *conn, ch *dataChan) {
	c.sftp, c.sftpCh = ch.cl, ch
	if !ch.shareWatched {
		ch.shareWatched = true
		p.wg.Add(1)
		go p.watchSFTP(c, ch)
	}
}

// watchSFTP clears the connection's shared SFTP client if its channel ends on its own, so the next
// borrower opens a new one; it marks ch closed, so that it is neither parked nor shared again
// once lent.
func (p *Pool) watchSFTP(c *conn, ch *dataChan) {
	defer p.wg.Done()
	_ = ch.cl.Wait()
	ch.closed.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.sftp == ch.cl {
		c.sftp, c.sftpCh = nil, nil
		if !c.dead {
			c.slots++
			p.serveWaitersLocked(c.kp)
		}
	}
}

// borrowShared lends the least-borrowed ready shared SFTP client of t's connections, or returns
// the channel to wait on while another caller opens one.
func (p *Pool) borrowShared(t Target) (*SharedSFTP, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kp := p.keys[t.Key]
	if kp == nil || p.closing {
		return nil, nil
	}
	var best *conn
	for _, c := range kp.conns {
		if c.dead || c.sftp == nil {
			continue
		}
		if best == nil || c.sftpUse < best.sftpUse {
			best = c
		}
	}
	if best == nil {
		return nil, kp.sftpPending
	}
	best.sftpUse++
	return &SharedSFTP{Client: best.sftp, p: p, c: best}, nil
}

// Check dials a fresh connection for t (through the host's dial limit), proving the credential
// and host key work, and keeps it in the pool if there is room. A success clears the
// authentication circuit breaker for t's key.
func (p *Pool) Check(ctx context.Context, t Target) error {
	if _, ok := ctx.Deadline(); !ok { // waits for dial slots end like an acquire's
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.AcquireTimeout)
		defer cancel()
	}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrClosed
	}
	h := p.hostLocked(t.hostID())
	h.checks++ // keeps h in p.hosts (evictIdle) until this check is over
	p.mu.Unlock()
	defer func() { // runs after the Unlock deferred below
		p.mu.Lock()
		h.checks--
		p.mu.Unlock()
	}()
	timeout := p.cfg.DialTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	// The owner's dial slot, then the host's: checks with a failing credential hold at most the
	// owner's share of the host's dial slots.
	release, err := p.ownerDialSlot(ctx, h, t.Key.owner())
	if err != nil {
		return fmt.Errorf("%w: waiting for a dial slot for %s: %w", ErrUnavailable, t.Addr, err)
	}
	defer release()
	select {
	case h.dialSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting to dial %s: %w", ErrUnavailable, t.Addr, ctx.Err())
	}
	client, via, err := p.dial(ctx, t, timeout)
	<-h.dialSem
	p.metrics.dials.WithLabelValues(dialResult(err)).Inc()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noteAuthLocked(h, t.Key.owner(), err)
	kp := p.keyPoolLocked(t)
	var je *JumpError
	if err != nil {
		kp.lastErr = err
		if errors.Is(err, ErrAuth) && !errors.As(err, &je) {
			kp.authErr = err
			p.failWaitersLocked(kp, err)
		}
		return err
	}
	kp.authErr = nil
	sh := p.shareLocked(h, t.Key.owner())
	if p.closing || len(kp.conns)+kp.dialing >= p.cfg.MaxConnsPerKey || h.conns+h.dialing >= p.cfg.MaxConnsPerHost ||
		sh.conns+sh.dialing >= p.cfg.MaxConnsPerOwnerHost {
		h.tidyShareLocked(t.Key.owner())
		if via != nil {
			p.releaseTunnelLocked(via)
		}
		go client.Close()
		return nil
	}
	p.addConnLocked(kp, h, client, via)
	p.serveWaitersLocked(kp)
	return nil
}
