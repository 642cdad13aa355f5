package files

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"

	"github.com/pkg/sftp"
)

// AppendOptions controls ResumableFile.Append.
type AppendOptions struct {
	// Buffers are the chunk buffers (at least one; all the same length). Their number bounds
	// the chunks in flight and so the memory: with two or more, the next chunk is read from the
	// body while earlier ones are being written.
	Buffers [][]byte
	// Stripes delivers further SFTP channels to the same system as they open; the part file is
	// opened for writing on each and chunks go over whichever channel is free (for long fat
	// paths, where one channel's window is the limit). The sender owns the channels and keeps
	// them until the ResumableFile is closed: the handles on them stay open till then.
	Stripes <-chan *sftp.Client
	// Commit is called, from Append's goroutine and in offset order, with the end of each
	// prefix of the file now completely written and the hash state after it; its error stops
	// the append. Several chunks finishing together are one call.
	Commit func(end int64, hashState []byte) error
	// Hold, if set, is asked before each chunk read from the body is handed to a writer: while
	// it returns nil the caller may still write the file (it holds the upload's lease). Its
	// error stops the append and that chunk, and every later one, is not written: a writer
	// that lost the upload to another never writes over what the other committed.
	Hold func() error
	// Trace, if set, is told of each step as it ends, for timing it: "joined" (a stripe
	// channel's handle started writing), "first" (the first chunk's write was acknowledged)
	// and "written" (every write acknowledged and committed). It must not block.
	Trace func(step string)
}

// trace tells o.Trace of step, if set.
func (o AppendOptions) trace(step string) {
	if o.Trace != nil {
		o.Trace(step)
	}
}

// appendDone is one chunk's write finished.
type appendDone struct {
	seq int
	err error
}

// appendChunk is a chunk read, hashed and handed to a writer.
type appendChunk struct {
	seq   int
	off   int64
	buf   []byte
	end   int64
	state []byte
}

// Append writes r from offset off until limit (exclusive) or r's end, hashing the bytes in
// order with h (whose state is that after off bytes). Chunks are written concurrently, over the
// part file and every stripe channel, and committed in order: opts.Commit only ever hears of an
// offset below which every byte was written, with the hash state at that offset. It returns the
// offset reached by the bytes read (committed or not, see Commit) and the first error. On error
// the writes in flight are waited for; bytes past the last commit may or may not be on disk,
// which the committed offset makes harmless. The part file stays open on every stripe channel
// that joined, until rf is closed (Close or Finish).
func (rf *ResumableFile) Append(ctx context.Context, r io.Reader, off, limit int64, h hash.Hash, opts AppendOptions) (int64, error) {
	if len(opts.Buffers) == 0 || len(opts.Buffers[0]) == 0 {
		return off, errors.New("append: no buffers")
	}
	marshal, ok := h.(encoding.BinaryMarshaler)
	if !ok {
		return off, errors.New("append: hash state cannot be saved")
	}
	free := make(chan []byte, len(opts.Buffers))
	for _, b := range opts.Buffers {
		free <- b
	}
	work := make(chan appendChunk)
	done := make(chan appendDone, len(opts.Buffers))
	var wg sync.WaitGroup
	var mu sync.Mutex
	closed := false
	start := func(f *sftp.File) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return false
		}
		for range StripeChunksPerChannel {
			wg.Go(func() {
				for c := range work {
					_, err := f.WriteAt(c.buf, c.off)
					done <- appendDone{seq: c.seq, err: err}
					free <- c.buf[:cap(c.buf)]
				}
			})
		}
		return true
	}
	start(rf.file)
	stop := JoinOn(opts.Stripes, rf.tmp, os.O_WRONLY, func(f *sftp.File) bool {
		ok := start(f)
		if ok {
			opts.trace("joined")
		}
		return ok
	})

	// In-order commits, by a goroutine of their own so that a commit never waits for the body:
	// chunks finish in any order; meta holds those handed out and not yet committed.
	var cmu sync.Mutex
	meta := map[int]appendChunk{}
	finished := map[int]bool{}
	next := 0
	var firstErr error
	failed := func() error {
		cmu.Lock()
		defer cmu.Unlock()
		return firstErr
	}
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		first := true
		for d := range done {
			if first {
				opts.trace("first")
				first = false
			}
			cmu.Lock()
			if d.err != nil && firstErr == nil {
				firstErr = rf.f.writeErr("upload", rf.abs, d.err)
			}
			finished[d.seq] = true
			var last *appendChunk
			for finished[next] {
				c := meta[next]
				last = &c
				delete(meta, next)
				delete(finished, next)
				next++
			}
			stop := firstErr != nil
			cmu.Unlock()
			if last == nil || stop || opts.Commit == nil {
				continue
			}
			if err := opts.Commit(last.end, last.state); err != nil {
				cmu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("commit at %d: %w", last.end, err)
				}
				cmu.Unlock()
			}
		}
	}()

	var rerr error
	seq := 0
read:
	for off < limit && failed() == nil {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			rerr = ctx.Err()
			break read
		}
		n, err := fill(r, buf[:min(int64(len(buf)), limit-off)])
		if n > 0 && opts.Hold != nil {
			if herr := opts.Hold(); herr != nil {
				free <- buf
				rerr = herr
				break
			}
		}
		if n > 0 {
			h.Write(buf[:n])
			state, merr := marshal.MarshalBinary()
			if merr != nil {
				rerr = merr
				break
			}
			c := appendChunk{seq: seq, off: off, buf: buf[:n], end: off + int64(n), state: state}
			cmu.Lock()
			meta[seq] = c
			cmu.Unlock()
			seq++
			off += int64(n)
			work <- c
		} else {
			free <- buf
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	mu.Lock()
	closed = true
	mu.Unlock()
	close(work)
	wg.Wait()
	close(done)
	<-committed
	opts.trace("written")
	// The stripe channels' handles stay open until the caller closes the part file (Close or
	// Finish, all handles at once), and the opens still under way on channels that came late
	// are waited for only then: every write has been answered, nothing more is written (a
	// handle that opens now is refused), and the caller's answer need not wait for either.
	rf.mu.Lock()
	rf.stops = append(rf.stops, stop)
	rf.mu.Unlock()
	if firstErr != nil {
		return off, firstErr
	}
	return off, rerr
}
