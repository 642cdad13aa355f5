package wanem

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// bigBuf is the read buffer size: large reads keep the per-byte CPU cost low.
	bigBuf = 256 << 10
	// smallBuf and mediumBuf are the size classes short reads are copied into, so that a few
	// bytes in flight do not pin a whole read buffer.
	smallBuf  = 2 << 10
	mediumBuf = 32 << 10
	// queueChunks bounds the number of chunks in flight per direction.
	queueChunks = 1024
	// maxBatch and maxBatchBytes bound how many due chunks one writev combines.
	maxBatch      = 64
	maxBatchBytes = 1 << 20
)

// link is one direction of the emulated physical link: a virtual clock that serializes the
// chunks of every connection in arrival order at the configured rate.
type link struct {
	rate atomic.Int64 // bytes per second; 0 means unlimited; SetRate changes it

	mu   sync.Mutex
	next time.Time // when the link finishes sending what it has been given so far
}

// reserve books n bytes arriving at now and returns when their last byte has left the link.
// An idle link earns no credit, so there are no bursts above the rate.
func (l *link) reserve(now time.Time, n int) time.Time {
	rate := l.rate.Load()
	if rate <= 0 {
		return now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	start := now
	if l.next.After(now) {
		start = l.next
	}
	l.next = start.Add(time.Duration(int64(n) * int64(time.Second) / rate))
	return l.next
}

// setRate changes the rate for the bytes reserved from now on; what was booked at the old rate
// keeps its times, and the next reservation starts afresh.
func (l *link) setRate(rate int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rate.Store(rate)
	l.next = time.Time{}
}

// pools recycles chunk buffers in three size classes.
type pools struct {
	small, medium, big sync.Pool
}

// newPools returns pools whose buffers have the sizes smallBuf, mediumBuf and bigBuf.
func newPools() pools {
	mk := func(size int) func() any {
		return func() any { b := make([]byte, size); return &b }
	}
	return pools{
		small:  sync.Pool{New: mk(smallBuf)},
		medium: sync.Pool{New: mk(mediumBuf)},
		big:    sync.Pool{New: mk(bigBuf)},
	}
}

// forSize returns a pooled buffer of a smaller class that holds n bytes, or nil if n needs
// a big buffer.
func (ps *pools) forSize(n int) *[]byte {
	switch {
	case n <= smallBuf:
		return ps.small.Get().(*[]byte)
	case n <= mediumBuf:
		return ps.medium.Get().(*[]byte)
	}
	return nil
}

// put returns b to the pool of its class.
func (ps *pools) put(b *[]byte) {
	switch cap(*b) {
	case smallBuf:
		ps.small.Put(b)
	case mediumBuf:
		ps.medium.Put(b)
	case bigBuf:
		ps.big.Put(b)
	}
}

// chunk is a piece of one direction's byte stream on its way through the emulated path, or,
// when err is set, the end of the stream (io.EOF for a half-close).
type chunk struct {
	buf *[]byte
	n   int
	at  time.Time // deliver no earlier than this
	err error
}

// pipe is one direction of one connection: read relays src into the queue, write relays the
// queue into dst.
type pipe struct {
	c         *conn
	src, dst  *net.TCPConn
	link      *link
	gate      *gate
	pools     *pools
	delay     time.Duration
	limit     int64
	forwarded *atomic.Int64
	q         chan chunk

	mu     sync.Mutex
	queued int64         // bytes read from src and not yet written to dst
	freed  chan struct{} // signalled (capacity 1) when queued shrinks
}

// newPipe returns a pipe reading from src through l; the caller sets dst before starting
// write.
func (p *Proxy) newPipe(c *conn, src *net.TCPConn, l *link, forwarded *atomic.Int64) *pipe {
	return &pipe{
		c:         c,
		src:       src,
		link:      l,
		gate:      &p.gate,
		pools:     &p.pools,
		delay:     p.cfg.RTT / 2,
		limit:     p.cfg.Buffer,
		forwarded: forwarded,
		q:         make(chan chunk, queueChunks),
		freed:     make(chan struct{}, 1),
	}
}

// read relays src into the queue, stamping each chunk with its delivery time, until src ends
// or the connection closes. It stops reading while the buffer is full.
func (pp *pipe) read() {
	var big *[]byte
	defer func() {
		if big != nil {
			pp.pools.put(big)
		}
	}()
	for {
		size := chunkSize(pp.link.rate.Load(), pp.limit) // the rate can change (SetRate)
		if !pp.waitSpace(size) {
			return
		}
		if big == nil {
			big = pp.pools.big.Get().(*[]byte)
		}
		n, err := pp.src.Read((*big)[:size])
		now := time.Now()
		if n > 0 {
			at := pp.link.reserve(now, n).Add(pp.delay)
			buf := pp.pools.forSize(n)
			if buf != nil {
				copy(*buf, (*big)[:n])
			} else {
				buf, big = big, nil
			}
			pp.mu.Lock()
			pp.queued += int64(n)
			pp.mu.Unlock()
			if !pp.send(chunk{buf: buf, n: n, at: at}) {
				return
			}
		}
		if err != nil {
			select {
			case <-pp.c.done:
				return // our own close, not the peer's doing
			default:
			}
			pp.send(chunk{at: pp.link.reserve(now, 0).Add(pp.delay), err: err})
			return
		}
	}
}

// waitSpace blocks until a chunk of size bytes fits in the buffer; it reports false if the
// connection closed meanwhile.
func (pp *pipe) waitSpace(size int) bool {
	for {
		pp.mu.Lock()
		room := pp.limit - pp.queued
		pp.mu.Unlock()
		if room >= int64(size) {
			return true
		}
		select {
		case <-pp.freed:
		case <-pp.c.done:
			return false
		}
	}
}

// send queues ch for the writer; it reports false if the connection closed meanwhile.
func (pp *pipe) send(ch chunk) bool {
	select {
	case pp.q <- ch:
		return true
	case <-pp.c.done:
		return false
	}
}

// write relays the queue into dst, each chunk no earlier than its delivery time, combining
// chunks that are already due into one writev. At the end of the stream it half-closes dst,
// or resets the connection if the stream ended in an error.
func (pp *pipe) write() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]chunk, 0, maxBatch)
	bufs := make(net.Buffers, 0, maxBatch)
	var next chunk
	haveNext := false
	for {
		ch := next
		if !haveNext {
			select {
			case ch = <-pp.q:
			case <-pp.c.done:
				return
			}
		}
		haveNext = false
		if d := time.Until(ch.at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-pp.c.done:
				timer.Stop()
				return
			}
		}
		if !pp.gate.wait(pp.c.done) { // black-holed: hold it (Blackhole, Restore)
			return
		}
		if ch.err != nil {
			pp.finish(ch.err)
			return
		}
		batch = append(batch[:0], ch)
		size := ch.n
		now := time.Now()
	drain:
		for len(batch) < maxBatch && size < maxBatchBytes {
			select {
			case more := <-pp.q:
				if more.err != nil || more.at.After(now) {
					next, haveNext = more, true
					break drain
				}
				batch = append(batch, more)
				size += more.n
			default:
				break drain
			}
		}
		bufs = bufs[:0]
		for _, b := range batch {
			bufs = append(bufs, (*b.buf)[:b.n])
		}
		w := bufs
		n, err := w.WriteTo(pp.dst)
		pp.forwarded.Add(n)
		for _, b := range batch {
			pp.pools.put(b.buf)
		}
		clear(batch)
		pp.mu.Lock()
		pp.queued -= int64(size)
		pp.mu.Unlock()
		select {
		case pp.freed <- struct{}{}:
		default:
		}
		if err != nil {
			pp.c.close(true)
			return
		}
	}
}

// finish ends the stream on dst: a half-close for io.EOF, a reset of the whole connection for
// any other error.
func (pp *pipe) finish(err error) {
	if errors.Is(err, io.EOF) {
		if cerr := pp.dst.CloseWrite(); cerr == nil {
			return
		}
	}
	pp.c.close(true)
}
