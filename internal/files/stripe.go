package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/pkg/sftp"
)

// Striping: one SSH channel moves at most its window (2 MiB with OpenSSH and x/crypto/ssh) per
// round trip, so on a long path one file read or written over one channel crawls whatever the
// link. A striped read or write opens the same file on several channels and moves fixed-size
// chunks over all of them at once. Memory is the caller's: a fixed set of chunk buffers, handed
// in and given back, bounds what is in flight.

// OpenOn opens the already resolved absolute path abs on each of clients with flag (os.O_RDONLY
// for reads, os.O_WRONLY for writes into an existing temporary file: never O_CREATE, so no
// other name is ever made). On error the handles already opened are closed.
func OpenOn(clients []*sftp.Client, abs string, flag int) ([]*sftp.File, error) {
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		return nil, newErr("open", abs, ErrInvalid, errors.New("striped handles never create or truncate"))
	}
	out := make([]*sftp.File, 0, len(clients))
	for _, c := range clients {
		h, err := c.OpenFile(abs, flag)
		if err != nil {
			closeAll(out)
			return nil, wrap("open", abs, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// closeAll closes files, ignoring errors (used on paths that already fail).
func closeAll(fs []*sftp.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// chunk is one range of a striped read: buf[:n] holds the bytes at off once done is closed.
type chunk struct {
	off  int64
	buf  []byte
	n    int
	err  error
	done chan struct{}
}

// StripedReader reads a file of known size through several handles (the same file opened on
// different SFTP channels) at once, len(bufs) chunks ahead, and hands the bytes out in order.
// It is an io.ReadSeeker for http.ServeContent: a Seek stops the read-ahead and the next Read
// starts it again at the new offset. Reads stop at size even if the file grew; a file that
// shrank ends early with io.ErrUnexpectedEOF. Not safe for concurrent use; Close it before
// closing the handles or reusing the buffers.
type StripedReader struct {
	handles []io.ReaderAt
	size    int64
	bufs    [][]byte // free chunk buffers while no read-ahead runs
	pos     int64

	// read-ahead state, nil while stopped
	order chan *chunk   // chunks in file order, as they are scheduled
	free  chan []byte   // buffers the consumer is done with
	stop  chan struct{} // closed to end the read-ahead
	wg    sync.WaitGroup
	cur   *chunk // the chunk being handed out
	curAt int    // bytes of cur already handed out
	err   error  // sticky read error
}

// NewStripedReader reads size bytes through handles, one chunk per buffer in bufs in flight (at
// least one buffer; all the same length). Each handle serves len(bufs)/len(handles) reads at
// once, rounded up.
func NewStripedReader(handles []io.ReaderAt, size int64, bufs [][]byte) *StripedReader {
	return &StripedReader{handles: handles, size: size, bufs: bufs}
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
	work := make(chan *chunk)
	perHandle := (k + len(s.handles) - 1) / len(s.handles)
	for _, h := range s.handles {
		for range perHandle {
			s.wg.Add(1)
			go s.reader(h, work)
		}
	}
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
func (s *StripedReader) reader(h io.ReaderAt, work <-chan *chunk) {
	defer s.wg.Done()
	for c := range work {
		select {
		case <-s.stop:
			c.err = errStopped
		default:
			c.n, c.err = h.ReadAt(c.buf, c.off)
			if c.err != nil && errors.Is(c.err, io.EOF) {
				c.err = nil
				if c.n < len(c.buf) {
					c.err = io.ErrUnexpectedEOF // the file shrank since it was measured
				}
			}
		}
		close(c.done)
	}
}

// Read implements io.Reader.
func (s *StripedReader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.pos >= s.size {
		return 0, io.EOF
	}
	if s.order == nil {
		s.start()
	}
	if s.cur == nil {
		c, ok := <-s.order
		if !ok {
			return 0, io.EOF
		}
		<-c.done
		if c.err != nil {
			s.err = fmt.Errorf("striped read at %d: %w", c.off, c.err)
			s.free <- c.buf[:cap(c.buf)]
			return 0, s.err
		}
		s.cur, s.curAt = c, 0
	}
	n := copy(p, s.cur.buf[s.curAt:s.cur.n])
	s.curAt += n
	s.pos += int64(n)
	if s.curAt >= s.cur.n {
		s.free <- s.cur.buf[:cap(s.cur.buf)]
		s.cur = nil
	}
	return n, nil
}

// halt stops the read-ahead and takes every buffer back.
func (s *StripedReader) halt() {
	if s.order == nil {
		return
	}
	close(s.stop)
	if s.cur != nil {
		s.free <- s.cur.buf[:cap(s.cur.buf)]
		s.cur = nil
	}
	s.wg.Wait()
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
	s.halt()
	return nil
}

// stripedWrite copies r into the handles (the temporary file opened on several channels) in
// chunks of len(bufs[0]), each written with WriteAt on whichever handle is free, and hashes the
// bytes in order with h. It returns the number of bytes read from r; on error, writes still in
// flight are waited for before it returns.
func stripedWrite(ctx context.Context, handles []*sftp.File, r io.Reader, h io.Writer, bufs [][]byte) (int64, error) {
	type job struct {
		off int64
		buf []byte
	}
	free := make(chan []byte, len(bufs))
	for _, b := range bufs {
		free <- b
	}
	work := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var werr error
	perHandle := (len(bufs) + len(handles) - 1) / len(handles)
	for _, f := range handles {
		for range perHandle {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range work {
					mu.Lock()
					failed := werr != nil
					mu.Unlock()
					if !failed {
						if _, err := f.WriteAt(j.buf, j.off); err != nil {
							mu.Lock()
							werr = errors.Join(werr, err)
							mu.Unlock()
						}
					}
					free <- j.buf[:cap(j.buf)]
				}
			}()
		}
	}
	var off int64
	var rerr error
	for {
		buf := <-free
		mu.Lock()
		failed := werr != nil
		mu.Unlock()
		if failed {
			break
		}
		if err := ctx.Err(); err != nil {
			rerr = err
			break
		}
		n, err := fill(r, buf)
		if n > 0 {
			_, _ = h.Write(buf[:n]) // hashes never fail
			work <- job{off: off, buf: buf[:n]}
			off += int64(n)
		} else {
			free <- buf
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	close(work)
	wg.Wait()
	if rerr != nil {
		return off, rerr
	}
	return off, werr
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

// writeStriped opens the temporary file tmp (created exclusively through file) on every stripe
// channel and writes r over file and those handles at once.
func (f *FS) writeStriped(ctx context.Context, file *sftp.File, tmp string, r io.Reader, h io.Writer, opts UploadOptions) (int64, error) {
	extra, err := OpenOn(opts.Stripes, tmp, os.O_WRONLY)
	if err != nil {
		return 0, err
	}
	n, err := stripedWrite(ctx, append([]*sftp.File{file}, extra...), ctxReader{ctx, r}, h, opts.Buffers)
	for _, x := range extra {
		if cerr := x.Close(); cerr != nil && err == nil {
			err = cerr // a close reports a write the server failed late
		}
	}
	return n, err
}

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
