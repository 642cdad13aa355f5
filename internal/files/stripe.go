package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
)

// Striping: one SSH channel moves at most its window (2 MiB with OpenSSH and x/crypto/ssh) per
// round trip, so on a long path one file read or written over one channel crawls whatever the
// link. A striped read or write opens the same file on several channels and moves fixed-size
// chunks over all of them at once. Memory is the caller's: a fixed set of chunk buffers, handed
// in and given back, bounds what is in flight.

// JoinOn opens abs with flag on each SFTP channel that arrives on chans, as it arrives (several
// at once: each open is a round trip, and channels tend to arrive together), and hands the
// handle to join; a handle that join refuses (the striped read or write is over) is closed at
// once. flag is os.O_RDONLY for reads or os.O_WRONLY for writes into an existing temporary
// file: never O_CREATE or O_TRUNC, so no other name is ever made. A channel on which the open
// fails is skipped. stop ends the joining (channels that arrive later stay with their sender),
// waits for the opens under way, and returns the handles join took, for the caller to close
// once it is done with them.
func JoinOn(chans <-chan *sftp.Client, abs string, flag int, join func(*sftp.File) bool) (stop func() []*sftp.File) {
	quit := make(chan struct{})
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		joined []*sftp.File
	)
	wg.Go(func() {
		if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
			return
		}
		for {
			var c *sftp.Client
			var ok bool
			select {
			case c, ok = <-chans:
				if !ok {
					return
				}
			case <-quit:
				return
			}
			wg.Go(func() {
				h, err := c.OpenFile(abs, flag)
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if !join(h) {
					_ = h.Close()
					return
				}
				joined = append(joined, h)
			})
		}
	})
	return func() []*sftp.File {
		close(quit)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return joined
	}
}

// chunk is one range of a striped read: buf[:n] holds the bytes at off once done is closed.
type chunk struct {
	off  int64
	buf  []byte
	n    int
	err  error
	done chan struct{}
	h    atomic.Pointer[handle] // the handle reading it, once a reader took it
}

// handle is one of a striped read's handles.
type handle struct{ io.ReaderAt }

// Hedging: chunks are handed out in order, so one channel that stalls (a congested or lossy
// connection under it) holds every byte behind its chunk, however fast the other channels are.
// When the chunk at the head has been waited for longer than hedgeFactor times the usual chunk
// read (and at least hedgeMinDelay), the same range is read again on another handle into a
// spare buffer, and whichever read ends first is handed out. The spare is one of the caller's
// buffers set aside (so memory stays what the caller gave), and only one such read runs at a
// time; the slower read's buffer becomes the next spare once that read has ended.
const (
	hedgeFactor   = 4
	hedgeMinDelay = 20 * time.Millisecond
)

// StripedReader reads a file of known size through several handles (the same file opened on
// different SFTP channels) at once, len(bufs) chunks ahead, and hands the bytes out in order.
// Handles can join while it reads (Join): a striped download starts on its first channel and
// goes faster as further channels open. It is an io.ReadSeeker for http.ServeContent: a Seek
// stops the read-ahead and the next Read starts it again at the new offset. Reads stop at size
// even if the file grew; a file that shrank ends early with io.ErrUnexpectedEOF. Read, Seek and
// Close are not safe for concurrent use (Join is); Close it before closing the handles or
// reusing the buffers.
type StripedReader struct {
	size      int64
	perHandle int      // reads in flight per handle
	bufs      [][]byte // free chunk buffers while no read-ahead runs
	pos       int64

	spare   []byte         // the hedge buffer while no hedged read holds it (nil without hedging)
	spareCh chan []byte    // where a hedge buffer comes back once its read ended
	hwg     sync.WaitGroup // hedged reads and buffer returns
	avgRead atomic.Int64   // moving average of a chunk read, in nanoseconds
	hedged  atomic.Int64   // head chunks a hedged read delivered

	mu      sync.Mutex
	handles []*handle
	work    chan *chunk // the running read-ahead's chunks to read, nil while stopped
	closed  bool

	// read-ahead state, nil while stopped
	order chan *chunk   // chunks in file order, as they are scheduled
	free  chan []byte   // buffers the consumer is done with
	stop  chan struct{} // closed to end the read-ahead
	wg    sync.WaitGroup
	cur   *chunk // the chunk being handed out
	curAt int    // bytes of cur already handed out
	err   error  // sticky read error
}

// NewStripedReader reads size bytes through handles (at least one), with one chunk per buffer
// in bufs in flight (at least one buffer; all the same length) and perHandle reads in flight on
// each handle.
// With three buffers or more, one is set aside for hedged reads (see hedgeFactor).
func NewStripedReader(handles []io.ReaderAt, size int64, bufs [][]byte, perHandle int) *StripedReader {
	s := &StripedReader{size: size, bufs: bufs, perHandle: max(perHandle, 1), spareCh: make(chan []byte, 1)}
	for _, h := range handles {
		s.handles = append(s.handles, &handle{h})
	}
	if len(bufs) >= 3 {
		s.spare, s.bufs = bufs[len(bufs)-1], bufs[:len(bufs)-1]
	}
	return s
}

// Hedged returns how many chunks a hedged read delivered (see hedgeFactor).
func (s *StripedReader) Hedged() int64 { return s.hedged.Load() }

// Join adds a handle to the same file; reads start on it at once if the read-ahead runs. It
// returns false, and the caller keeps the handle, once the reader is closed.
func (s *StripedReader) Join(h io.ReaderAt) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	hd := &handle{h}
	s.handles = append(s.handles, hd)
	if s.work != nil {
		s.startReadersLocked(hd)
	}
	return true
}

// startReadersLocked starts perHandle readers on h for the running read-ahead.
func (s *StripedReader) startReadersLocked(h *handle) {
	for range s.perHandle {
		s.wg.Add(1)
		go s.reader(h, s.work)
	}
}

// start launches the scheduler and the readers at s.pos.
func (s *StripedReader) start() {
	k := len(s.bufs)
	s.order = make(chan *chunk, k)
	s.free = make(chan []byte, k)
	s.stop = make(chan struct{})
	for _, b := range s.bufs {
		s.free <- b
	}
	s.bufs = nil
	s.mu.Lock()
	s.work = make(chan *chunk)
	for _, h := range s.handles {
		s.startReadersLocked(h)
	}
	work := s.work
	s.mu.Unlock()
	s.wg.Add(1)
	go s.schedule(s.pos, work)
}

// schedule hands out chunks in file order as buffers come free, until size or stop.
func (s *StripedReader) schedule(off int64, work chan<- *chunk) {
	defer s.wg.Done()
	defer close(work)
	defer close(s.order)
	for off < s.size {
		var buf []byte
		select {
		case buf = <-s.free:
		case <-s.stop:
			return
		}
		c := &chunk{off: off, buf: buf[:min(int64(len(buf)), s.size-off)], done: make(chan struct{})}
		s.order <- c // never blocks: at most len(bufs) chunks exist
		select {
		case work <- c:
		case <-s.stop:
			c.err = errStopped
			close(c.done)
			return
		}
		off += int64(len(c.buf))
	}
}

var errStopped = errors.New("striped read stopped")

// reader fills chunks from h.
func (s *StripedReader) reader(h *handle, work <-chan *chunk) {
	defer s.wg.Done()
	for c := range work {
		select {
		case <-s.stop:
			c.err = errStopped
		default:
			c.h.Store(h)
			start := time.Now()
			c.n, c.err = readChunk(h, c.buf, c.off)
			if c.err == nil {
				s.noteRead(time.Since(start))
			}
		}
		close(c.done)
	}
}

// readChunk reads buf at off from h; the end of the file before buf is full means the file
// shrank since it was measured.
func readChunk(h io.ReaderAt, buf []byte, off int64) (int, error) {
	n, err := h.ReadAt(buf, off)
	if err != nil && errors.Is(err, io.EOF) {
		err = nil
		if n < len(buf) {
			err = io.ErrUnexpectedEOF
		}
	}
	return n, err
}

// noteRead adds one chunk read's duration to the moving average (weight 1/8).
func (s *StripedReader) noteRead(d time.Duration) {
	for {
		old := s.avgRead.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if s.avgRead.CompareAndSwap(old, next) {
			return
		}
	}
}

// head waits for chunk c, the next to hand out, and returns its bytes. If c is slow to come
// and a spare buffer and another handle are free, it reads the same range there too and takes
// whichever read ends first.
func (s *StripedReader) head(c *chunk) ([]byte, int, error) {
	select {
	case <-c.done:
		return c.buf, c.n, c.err
	default:
	}
	if s.spare == nil {
		select {
		case s.spare = <-s.spareCh:
		default:
		}
	}
	if s.spare == nil {
		<-c.done
		return c.buf, c.n, c.err
	}
	delay := max(hedgeMinDelay, hedgeFactor*time.Duration(s.avgRead.Load()))
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-c.done:
		return c.buf, c.n, c.err
	case <-t.C:
	}
	var other *handle
	if cur := c.h.Load(); cur != nil { // nil: no reader has the chunk yet
		s.mu.Lock()
		for _, h := range s.handles {
			if h != cur {
				other = h
			}
		}
		s.mu.Unlock()
	}
	if other == nil {
		<-c.done
		return c.buf, c.n, c.err
	}
	spare := s.spare[:len(c.buf)]
	s.spare = nil
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	s.hwg.Go(func() {
		n, err := readChunk(other, spare, c.off)
		res <- result{n, err}
	})
	select {
	case <-c.done:
		s.hwg.Go(func() { <-res; s.spareCh <- spare[:cap(spare)] })
		return c.buf, c.n, c.err
	case r := <-res:
		if r.err != nil { // the hedge failed: the first read decides
			s.spare = spare[:cap(spare)]
			<-c.done
			return c.buf, c.n, c.err
		}
		s.hedged.Add(1)
		s.hwg.Go(func() { <-c.done; s.spareCh <- c.buf[:cap(c.buf)] })
		return spare, r.n, nil
	}
}

// Read implements io.Reader.
func (s *StripedReader) Read(p []byte) (int, error) {
	b, err := s.next()
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	s.advance(n)
	return n, nil
}

// WriteNTo writes the next n bytes (fewer if the file ends first) to w straight from the chunk
// buffers, a chunk's bytes in one Write, without the copy Read makes. It returns the bytes
// written; the end of the file before n is no error (the count tells).
func (s *StripedReader) WriteNTo(w io.Writer, n int64) (int64, error) {
	var done int64
	for done < n {
		b, err := s.next()
		if errors.Is(err, io.EOF) {
			return done, nil
		}
		if err != nil {
			return done, err
		}
		b = b[:min(int64(len(b)), n-done)]
		m, err := w.Write(b)
		s.advance(m)
		done += int64(m)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// next returns the bytes of the current chunk not yet handed out, waiting for the next chunk
// (and starting the read-ahead) when the current one is used up; io.EOF at the end.
func (s *StripedReader) next() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.pos >= s.size {
		return nil, io.EOF
	}
	if s.order == nil {
		s.start()
	}
	if s.cur == nil {
		c, ok := <-s.order
		if !ok {
			return nil, io.EOF
		}
		buf, n, err := s.head(c)
		if err != nil {
			s.err = fmt.Errorf("striped read at %d: %w", c.off, err)
			s.free <- buf[:cap(buf)]
			return nil, s.err
		}
		s.cur, s.curAt = &chunk{off: c.off, buf: buf, n: n}, 0
	}
	return s.cur.buf[s.curAt:s.cur.n], nil
}

// advance marks n more bytes of the current chunk handed out, giving its buffer back to the
// read-ahead once all are.
func (s *StripedReader) advance(n int) {
	s.curAt += n
	s.pos += int64(n)
	if s.curAt >= s.cur.n {
		s.free <- s.cur.buf[:cap(s.cur.buf)]
		s.cur = nil
	}
}

// halt stops the read-ahead and takes every buffer back.
func (s *StripedReader) halt() {
	if s.order == nil {
		return
	}
	s.mu.Lock()
	s.work = nil // handles joining from now on wait for the next start
	s.mu.Unlock()
	close(s.stop)
	if s.cur != nil {
		s.free <- s.cur.buf[:cap(s.cur.buf)]
		s.cur = nil
	}
	s.wg.Wait()
	s.hwg.Wait()
	select {
	case b := <-s.spareCh:
		s.spare = b
	default:
	}
	for c := range s.order { // scheduled chunks still hold their buffers
		s.free <- c.buf[:cap(c.buf)]
	}
	close(s.free)
	for b := range s.free {
		s.bufs = append(s.bufs, b)
	}
	s.order, s.free, s.stop = nil, nil, nil
}

// Seek implements io.Seeker; the size is known, so seeking to the end asks nobody.
func (s *StripedReader) Seek(offset int64, whence int) (int64, error) {
	abs, err := SeekPosition(s.pos, s.size, offset, whence)
	if err != nil {
		return 0, err
	}
	if abs != s.pos {
		s.halt()
		s.pos, s.err = abs, nil
	}
	return abs, nil
}

// Close stops the read-ahead and waits for the readers; the handles and buffers are then free
// for the caller to close and reuse. It does not close the handles.
func (s *StripedReader) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.halt()
	return nil
}

// stripeWriter copies a stream into the same file opened on several SFTP channels, in chunks
// of the buffers' length, each written with WriteAt by whichever handle's writer is free.
// Handles can join while it writes (add). Memory is the buffers handed in.
type stripeWriter struct {
	free      chan []byte
	work      chan stripeJob
	perHandle int
	wg        sync.WaitGroup

	mu   sync.Mutex
	err  error // first write errors, joined
	done bool  // no more writers may start
}

// stripeJob is one chunk to write at off.
type stripeJob struct {
	off int64
	buf []byte
}

func newStripeWriter(bufs [][]byte, perHandle int) *stripeWriter {
	w := &stripeWriter{free: make(chan []byte, len(bufs)), work: make(chan stripeJob), perHandle: max(perHandle, 1)}
	for _, b := range bufs {
		w.free <- b
	}
	return w
}

// add starts writers on f (the file opened on one more channel); it returns false, and the
// caller keeps f, once the copy is over.
func (w *stripeWriter) add(f io.WriterAt) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return false
	}
	for range w.perHandle {
		w.wg.Add(1)
		go w.writer(f)
	}
	return true
}

// writer writes chunks through f until the work ends; after a failure it only gives buffers back.
func (w *stripeWriter) writer(f io.WriterAt) {
	defer w.wg.Done()
	for j := range w.work {
		if w.failed() == nil {
			if _, err := f.WriteAt(j.buf, j.off); err != nil {
				w.mu.Lock()
				w.err = errors.Join(w.err, err)
				w.mu.Unlock()
			}
		}
		w.free <- j.buf[:cap(j.buf)]
	}
}

func (w *stripeWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// copy reads r to its end into the handles, hashing the bytes in order with h (unless h is
// nil), and returns the number of bytes read from r. On error, writes still in flight are
// waited for before it returns. At least one handle must have been added.
func (w *stripeWriter) copy(ctx context.Context, r io.Reader, h io.Writer) (int64, error) {
	var off int64
	var rerr error
	for {
		buf := <-w.free
		if w.failed() != nil {
			break
		}
		if err := ctx.Err(); err != nil {
			rerr = err
			break
		}
		n, err := fill(r, buf)
		if n > 0 {
			if h != nil {
				_, _ = h.Write(buf[:n]) // hashes never fail
			}
			w.work <- stripeJob{off: off, buf: buf[:n]}
			off += int64(n)
		} else {
			w.free <- buf
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
	close(w.work)
	w.wg.Wait()
	if rerr != nil {
		return off, rerr
	}
	return off, w.failed()
}

// fill reads into buf until it is full or r ends. Unlike io.ReadFull it tells a clean end of r
// (io.EOF) from a body cut short (io.ErrUnexpectedEOF from r, which must fail the upload).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writeStriped writes r into the temporary file tmp (created exclusively through file) in
// chunks, over file at once and over every stripe channel as it arrives (opened there for
// writing); without opts.Stripes over file alone. The handles the stripe channels opened are
// closed all at once, each close a round trip: on error before it returns; on success in the
// background, so that they overlap the caller's last requests on file, and closed waits for
// them and returns the first close error (a close reports a write the server failed late).
// closed must be called once the caller is done, before the file is renamed into place.
func (f *FS) writeStriped(ctx context.Context, file *sftp.File, tmp string, r io.Reader, h io.Writer, opts UploadOptions) (n int64, closed func() error, err error) {
	w := newStripeWriter(opts.Buffers, StripeChunksPerChannel)
	w.add(file)
	stop := func() []*sftp.File { return nil }
	if opts.Stripes != nil {
		stop = JoinOn(opts.Stripes, tmp, os.O_WRONLY, func(x *sftp.File) bool {
			if !w.add(x) {
				return false
			}
			opts.trace("joined")
			return true
		})
	}
	n, err = w.copy(ctx, ctxReader{ctx, r}, h)
	closed = closeAll(stop())
	if err != nil {
		_ = closed()
		return n, nil, err
	}
	return n, closed, nil
}

// closeAll starts closing every handle in hs at once and returns what waits for them and
// reports the first error; it may be called more than once.
func closeAll[C io.Closer](hs []C) func() error {
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, x := range hs {
		wg.Go(func() { errs[i] = x.Close() })
	}
	return sync.OnceValue(func() error {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// StripeChunksPerChannel is how many chunks each channel of a striped read or write moves at
// once: two, so that one chunk's round trip overlaps the next. Callers hand in this many
// buffers per channel.
const StripeChunksPerChannel = 2

// SeekPosition is the absolute position io.Seeker's Seek(offset, whence) asks for, from the
// current position pos in a file of size bytes; a negative result or an unknown whence is an
// error. Readers that know their size share it.
func SeekPosition(pos, size, offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = pos + offset
	case io.SeekEnd:
		abs = size + offset
	default:
		return 0, fmt.Errorf("seek: bad whence %d", whence)
	}
	if abs < 0 {
		return 0, errors.New("seek: negative position")
	}
	return abs, nil
}
