package sftp

import (
	"context"
	"encoding"
	"fmt"
	"io"
	"sync"
)

// conn implements a bidirectional channel on which client and server
// connections are multiplexed.
type conn struct {
	io.Reader
	io.WriteCloser
	// this is the same allocator used in packet manager
	alloc      *allocator
	sync.Mutex // used to serialise writes to sendPacket
}

// the orderID is used in server mode if the allocator is enabled.
// For the client mode just pass 0.
// It returns io.EOF if the connection is closed and
// there are no more packets to read.
func (c *conn) recvPacket(orderID uint32) (fxp, []byte, error) {
	return recvPacket(c, c.alloc, orderID)
}

func (c *conn) sendPacket(m encoding.BinaryMarshaler) error {
	c.Lock()
	defer c.Unlock()

	return sendPacket(c, m)
}

func (c *conn) Close() error {
	c.Lock()
	defer c.Unlock()
	return c.WriteCloser.Close()
}

type clientConn struct {
	conn
	wg sync.WaitGroup

	wait func() error // if non-nil, call this during Wait() to get a possible remote status error.

	sync.Mutex                          // protects inflight and dsts
	inflight   map[uint32]chan<- result // outstanding requests
	// dsts are the buffers of outstanding reads sent with dispatchRead: recv
	// reads the data of an SSH_FXP_DATA reply straight into its read's buffer.
	dsts map[uint32][]byte

	closed chan struct{}
	err    error
}

// Wait blocks until the conn has shut down, and return the error
// causing the shutdown. It can be called concurrently from multiple
// goroutines.
func (c *clientConn) Wait() error {
	<-c.closed

	if c.wait == nil {
		// Only return this error if c.wait won't return something more useful.
		return c.err
	}

	if err := c.wait(); err != nil {

		// TODO: when https://github.com/golang/go/issues/35025 is fixed,
		// we can remove this if block entirely.
		// Right now, it’s always going to return this, so it is not useful.
		// But we have this code here so that as soon as the ssh library is updated,
		// we can return a possibly more useful error.
		if err.Error() == "ssh: session not started" {
			return c.err
		}

		return err
	}

	// c.wait returned no error; so, let's return something maybe more useful.
	return c.err
}

// Close closes the SFTP session.
func (c *clientConn) Close() error {
	defer c.wg.Wait()
	return c.conn.Close()
}

// recv continuously reads from the server and forwards responses to the
// appropriate channel.
func (c *clientConn) recv() error {
	defer c.conn.Close()

	for {
		typ, data, done, err := c.recvReply()
		if err != nil {
			return err
		}
		if done {
			continue // an SSH_FXP_DATA reply recvReply read into its read's buffer
		}
		sid, _, err := unmarshalUint32Safe(data)
		if err != nil {
			return err
		}

		ch, ok := c.getChannel(sid)
		if !ok {
			// This is an unexpected occurrence. Send the error
			// back to all listeners so that they terminate
			// gracefully.
			return fmt.Errorf("sid not found: %d", sid)
		}

		ch <- result{typ: typ, data: data}
	}
}

// recvReply reads the next packet as recvPacket does and returns its type and
// payload; except that an SSH_FXP_DATA reply to a read sent with dispatchRead
// is read straight into that read's buffer, without allocating a packet, and
// handed to the read's channel here (with result.direct set), and then
// recvReply returns done and no payload.
func (c *clientConn) recvReply() (typ fxp, payload []byte, done bool, err error) {
	var head [9]byte // uint32 length, byte type, uint32 request id
	if n, err := io.ReadFull(c, head[:4]); err != nil {
		if err == io.EOF {
			return 0, nil, false, err
		}
		return 0, nil, false, fmt.Errorf("error reading packet length: %d of 4: %w", n, err)
	}
	length, _ := unmarshalUint32(head[:4])
	if length > maxMsgLength {
		debug("recv packet %d bytes too long", length)
		return 0, nil, false, errLongPacket
	}
	if length == 0 {
		debug("recv packet of 0 bytes too short")
		return 0, nil, false, errShortPacket
	}
	headLen := min(length, 5)
	if n, err := io.ReadFull(c, head[4:4+headLen]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, false, fmt.Errorf("error reading packet body: %d of %d: %w", n, length, err)
	}
	typ = fxp(head[4])
	if typ == sshFxpData && length >= 9 {
		sid, _ := unmarshalUint32(head[5:9])
		if ch, dst, ok := c.getRead(sid); ok {
			n, rerr, err := c.recvData(length-5, dst)
			if err != nil {
				// The read is out of inflight, so broadcastErr will not
				// tell it: tell it as broadcastErr would.
				ch <- result{err: ErrSSHFxConnectionLost}
				return 0, nil, false, err
			}
			ch <- result{typ: typ, err: rerr, n: n, direct: true}
			return typ, nil, true, nil
		}
	}

	b := make([]byte, length)
	copy(b, head[4:4+headLen])
	if n, err := io.ReadFull(c, b[headLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, false, fmt.Errorf("error reading packet body: %d of %d: (%s) %w", int(headLen)+n, length, typ, err)
	}
	return typ, b[1:], false, nil
}

// recvData reads the rest of an SSH_FXP_DATA reply, rest (at least 4) bytes
// after its request id: the data's length and the data, as much of it as fits
// into dst (as unmarshalDataReply and copy would), discarding the rest of the
// packet. A reply whose data is longer than the packet fails the read (rerr)
// but not the connection (err).
func (c *clientConn) recvData(rest uint32, dst []byte) (n int, rerr, err error) {
	var count [4]byte
	if _, err := io.ReadFull(c, count[:]); err != nil {
		return 0, nil, fmt.Errorf("error reading packet body: %w", noEOF(err))
	}
	rest -= 4
	if l, _ := unmarshalUint32(count[:]); l > rest {
		rerr = errShortPacket
	} else {
		n = int(min(l, uint32(len(dst))))
		if _, err := io.ReadFull(c, dst[:n]); err != nil {
			return 0, nil, fmt.Errorf("error reading packet body: %w", noEOF(err))
		}
		rest -= uint32(n)
	}
	if rest > 0 {
		if _, err := io.CopyN(io.Discard, c, int64(rest)); err != nil {
			return 0, nil, fmt.Errorf("error reading packet body: %w", noEOF(err))
		}
	}
	return n, rerr, nil
}

// noEOF is err, with io.EOF (the end of the stream inside a packet) made
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (c *clientConn) putChannel(ch chan<- result, sid uint32, dst []byte) bool {
	c.Lock()
	defer c.Unlock()

	select {
	case <-c.closed:
		// already closed with broadcastErr, return error on chan.
		ch <- result{err: ErrSSHFxConnectionLost}
		return false
	default:
	}

	c.inflight[sid] = ch
	if dst != nil {
		if c.dsts == nil {
			c.dsts = make(map[uint32][]byte)
		}
		c.dsts[sid] = dst
	}
	return true
}

func (c *clientConn) getChannel(sid uint32) (chan<- result, bool) {
	c.Lock()
	defer c.Unlock()

	ch, ok := c.inflight[sid]
	delete(c.inflight, sid)
	delete(c.dsts, sid)

	return ch, ok
}

// getRead takes the outstanding read sid out of inflight if it was sent with
// dispatchRead, and returns its channel and buffer: recv then owns the buffer
// until it sends the read's result.
func (c *clientConn) getRead(sid uint32) (chan<- result, []byte, bool) {
	c.Lock()
	defer c.Unlock()

	dst, ok := c.dsts[sid]
	ch, inflight := c.inflight[sid]
	if !ok || !inflight {
		return nil, nil, false
	}
	delete(c.inflight, sid)
	delete(c.dsts, sid)

	return ch, dst, true
}

// result captures the result of receiving the a packet from the server
type result struct {
	typ  fxp
	data []byte
	err  error

	// direct: an SSH_FXP_DATA reply whose n bytes of data recv read straight
	// into the buffer of the read sent with dispatchRead (data is nil).
	direct bool
	n      int
}

// readData returns how many bytes the SSH_FXP_DATA reply s to read id put
// into b: recv put them there already if the read was sent with
// dispatchRead; otherwise they are copied from the reply.
func (s result) readData(id uint32, b []byte) (int, error) {
	if s.direct {
		return s.n, nil
	}
	data, err := unmarshalDataReply(id, s.data)
	if err != nil {
		return 0, err
	}
	return copy(b, data), nil
}

type idmarshaler interface {
	id() uint32
	encoding.BinaryMarshaler
}

func (c *clientConn) sendPacket(ctx context.Context, ch chan result, p idmarshaler) (fxp, []byte, error) {
	if cap(ch) < 1 {
		ch = make(chan result, 1)
	}

	c.dispatchRequest(ch, p)

	select {
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case s := <-ch:
		return s.typ, s.data, s.err
	}
}

// dispatchRequest should ideally only be called by race-detection tests outside of this file,
// where you have to ensure two packets are in flight sequentially after each other.
func (c *clientConn) dispatchRequest(ch chan<- result, p idmarshaler) {
	c.dispatch(ch, p, nil)
}

// dispatchRead sends the read p whose data is to go into dst (at most
// len(dst) bytes of it): recv reads an SSH_FXP_DATA reply straight into dst
// and sends a result with direct set. dst belongs to recv until the result
// arrives on ch, so the caller must wait for it before it reuses dst, even
// when it no longer wants the data.
func (c *clientConn) dispatchRead(ch chan<- result, p *sshFxpReadPacket, dst []byte) {
	c.dispatch(ch, p, dst[:len(dst):len(dst)])
}

// sendRead is dispatchRead, waiting for the result.
func (c *clientConn) sendRead(ch chan result, p *sshFxpReadPacket, dst []byte) result {
	if cap(ch) < 1 {
		ch = make(chan result, 1)
	}
	c.dispatchRead(ch, p, dst)
	return <-ch
}

func (c *clientConn) dispatch(ch chan<- result, p idmarshaler, dst []byte) {
	sid := p.id()

	if !c.putChannel(ch, sid, dst) {
		// already closed.
		return
	}

	if err := c.conn.sendPacket(p); err != nil {
		if ch, ok := c.getChannel(sid); ok {
			ch <- result{err: err}
		}
	}
}

// broadcastErr sends an error to all goroutines waiting for a response.
func (c *clientConn) broadcastErr(err error) {
	c.Lock()
	defer c.Unlock()

	bcastRes := result{err: ErrSSHFxConnectionLost}
	for sid, ch := range c.inflight {
		ch <- bcastRes

		// Replace the chan in inflight,
		// we have hijacked this chan,
		// and this guarantees always-only-once sending.
		c.inflight[sid] = make(chan<- result, 1)
	}
	clear(c.dsts) // recv has returned: nothing reads into them

	c.err = err
	close(c.closed)
}

type serverConn struct {
	conn
}

func (s *serverConn) sendError(id uint32, err error) error {
	return s.sendPacket(statusFromError(id, err))
}
