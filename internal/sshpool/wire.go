package sshpool

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
)

// wire is the network connection under one SSH connection.
//
// It coalesces writes: x/crypto/ssh encrypts each packet under its transport's lock and writes
// and flushes it at once, one write(2) per packet. A Write here copies the packet into a pending
// buffer and returns; one flusher goroutine per busy connection writes everything pending in one
// write(2), so packets queued while it was in the last one (other channels', or the next ones of
// a stream while the kernel copied the last) leave together, and the next packet is encrypted
// while the last is being sent. An idle connection pays nothing: a Write with no flush under way
// starts the flusher at once, so a lone packet is not held back, and the flusher ends (its
// buffer back in a pool) when nothing is pending. At most maxPending bytes wait: a Write beyond
// that blocks until the flusher has taken them, which keeps x/crypto's flow control honest. A
// write error is returned by the Writes after it, as x/crypto itself does.
//
// It counts the writes that put bytes on the network, so that a request which failed because the
// connection died can be told apart as never sent: x/crypto/ssh reports both "the channel was
// already closed, nothing written" and "written, then the connection died before the reply" as
// io.EOF. settle waits until what was queued has been written or has failed, so the count is
// final.
type wire struct {
	net.Conn
	writes atomic.Uint64
	// sftpPacket is the SFTP packet size this connection's server takes (see newSFTP), 0 until
	// the first SFTP channel found out.
	sftpPacket atomic.Int64
	// rtt is the shortest round trip (nanoseconds) measured on this connection, 0 until the
	// first SFTP channel measured one (see newSFTP).
	rtt atomic.Int64

	mu       sync.Mutex
	cond     sync.Cond // on mu: space in pending, or the flusher finished
	pending  []byte    // bytes to write next
	flushing bool      // a flusher goroutine runs
	err      error     // the first write error, or net.ErrClosed after Close
	flushes  uint64    // write(2) calls, for tests
	packets  uint64    // Writes accepted, for tests
}

// maxPending bounds the bytes a wire holds for its flusher.
const maxPending = 256 << 10

// pendingPool recycles the pending buffers of connections whose flusher went idle.
var pendingPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// newWire wraps nc.
func newWire(nc net.Conn) *wire {
	w := &wire{Conn: nc}
	w.cond.L = &w.mu
	return w
}

// Write queues p for the flusher (see wire).
func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && len(w.pending) > 0 && len(w.pending)+len(p) > maxPending {
		w.cond.Wait()
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.pending == nil {
		w.pending = (*pendingPool.Get().(*[]byte))[:0]
	}
	w.pending = append(w.pending, p...)
	w.packets++
	if !w.flushing {
		w.flushing = true
		go w.flush()
	}
	return len(p), nil
}

// flush writes what is pending until nothing is, then returns its buffers to the pool.
func (w *wire) flush() {
	var spare []byte
	w.mu.Lock()
	for len(w.pending) > 0 && w.err == nil {
		b := w.pending
		w.pending = spare
		spare = nil
		w.mu.Unlock()
		n, err := w.Conn.Write(b)
		if n > 0 {
			w.writes.Add(1)
		}
		w.mu.Lock()
		w.flushes++
		if err != nil && w.err == nil {
			w.err = fmt.Errorf("ssh connection write: %w", err)
		}
		spare = b[:0]
		w.cond.Broadcast()
	}
	if w.pending != nil && len(w.pending) == 0 {
		putPending(w.pending)
		w.pending = nil
	}
	if w.err != nil {
		w.pending = nil // never written: the connection is done
	}
	w.flushing = false
	w.cond.Broadcast()
	w.mu.Unlock()
	if spare != nil {
		putPending(spare)
	}
}

// putPending returns b to the pool unless it grew too big to keep.
func putPending(b []byte) {
	if cap(b) <= 2*maxPending {
		b = b[:0]
		pendingPool.Put(&b)
	}
}

// settle waits until everything queued so far has been written or has failed.
func (w *wire) settle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing {
		w.cond.Wait()
	}
}

// Close closes the connection at once; what is still pending is dropped (x/crypto closes a
// connection without a last message), and a flusher in a write fails out of it.
func (w *wire) Close() error {
	w.mu.Lock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	return w.Conn.Close()
}

// stats returns the Writes accepted and the write(2) calls made so far.
func (w *wire) stats() (packets, flushes uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.packets, w.flushes
}

// wiredConn is an SSH connection that remembers its wire; Client.Conn holds one for every
// connection the pool dials, and wireOf finds it again.
type wiredConn struct {
	ssh.Conn
	w *wire
}

// wireOf returns the wire under client, or nil for a client the pool did not dial itself.
func wireOf(client *ssh.Client) *wire {
	if wc, ok := client.Conn.(wiredConn); ok {
		return wc.w
	}
	return nil
}

// Start starts cmd on the session's channel, as ssh.Session.Start does, and classifies a failure
// caused by the connection: an error wrapping ErrConnLost, and also ErrNotStarted when the exec
// request never left this process (the connection was already gone, or no byte reached the
// network after the request was handed over), so that nothing can have run on the server and the
// caller may start the command again on another connection. A connection that failed this way is
// removed from the pool at once.
func (s *Session) Start(cmd string) error {
	return s.request("exec", func() error { return s.Session.Start(cmd) })
}

// RequestSubsystem starts subsystem name on the session's channel, classifying a failure caused
// by the connection as Start does.
func (s *Session) RequestSubsystem(name string) error {
	return s.request("subsystem "+name, func() error { return s.Session.RequestSubsystem(name) })
}

// request runs send (one channel request with a reply) and classifies its failure.
func (s *Session) request(what string, send func() error) error {
	w := wireOf(s.c.client)
	var before uint64
	if w != nil {
		before = w.writes.Load()
	}
	err := send()
	if err == nil {
		return nil
	}
	if !isConnBroken(err) {
		// The server answered and refused, or the session was misused: the connection is fine.
		return fmt.Errorf("%s request on %s: %w", what, s.c.kp.key, err)
	}
	s.p.mu.Lock()
	s.p.killLocked(s.c)
	s.p.serveWaitersLocked(s.c.kp)
	s.p.mu.Unlock()
	if w != nil {
		w.settle() // the request was queued: written, or failed with the connection
	}
	if w != nil && w.writes.Load() == before {
		return fmt.Errorf("%w: %w to %s before the %s request was sent: %w", ErrNotStarted, ErrConnLost, s.c.kp.key, what, err)
	}
	return fmt.Errorf("%w: %s request to %s may have reached the server: %w", ErrConnLost, what, s.c.kp.key, err)
}
