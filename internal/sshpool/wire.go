package sshpool

import (
	"fmt"
	"net"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
)

// wire is the network connection under one SSH connection. It counts the writes that put bytes
// on the network, so that a request which failed because the connection died can be told apart
// as never sent: x/crypto/ssh reports both "the channel was already closed, nothing written" and
// "written, then the connection died before the reply" as io.EOF, and a failed socket write as
// success (the error is kept for later writes).
type wire struct {
	net.Conn
	writes atomic.Uint64
}

func (w *wire) Write(p []byte) (int, error) {
	n, err := w.Conn.Write(p)
	if n > 0 {
		w.writes.Add(1)
	}
	return n, err
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
	if w != nil && w.writes.Load() == before {
		return fmt.Errorf("%w: %w to %s before the %s request was sent: %w", ErrNotStarted, ErrConnLost, s.c.kp.key, what, err)
	}
	return fmt.Errorf("%w: %s request to %s may have reached the server: %w", ErrConnLost, what, s.c.kp.key, err)
}
