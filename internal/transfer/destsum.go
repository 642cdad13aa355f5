package transfer

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/digest"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// A file verified with sha256 used to be hashed on the destination after its last range
// landed: for 1 GiB on a 1 Gbit/s path that was over a second of the transfer spent waiting on
// one process. Instead, the destination hashes its temporary file while the copy goes on: one
// command (digest.StreamScript) per file reads each range back from disk as soon as every range
// before it is written, so when the last range lands only that range is left to hash.
//
// The streamed digest is accepted only when it equals the source's; anything else (the command
// could not start, a read failed, a range was never fed, a mismatch) falls back to hashing the
// finished file as before, so a wrong streamed digest can cost time but never a wrong result.

// maxDestSums bounds the streamed destination sums one run keeps open at a time: each holds a
// command channel on the destination for as long as its file copies.
const maxDestSums = 2

// maxDestSumBlock is the largest dd block a streamed sum reads with.
const maxDestSumBlock = 1 << 20

// destSumBlock is the dd block size for ranges of chunk bytes: the largest power of two that
// divides chunk, at most maxDestSumBlock; 0 when it is too small to be worth a stream.
func destSumBlock(chunk int64) int64 {
	b := min(chunk&-chunk, maxDestSumBlock)
	if b < 4<<10 {
		return 0
	}
	return b
}

// destSums runs the streamed sums of one doLarge call: a file's starts with its first written
// range, at most maxDestSums at a time.
type destSums struct {
	r   *run
	ctx context.Context
	wg  sync.WaitGroup // the sums' starts

	mu     sync.Mutex
	active int
	byItem map[*Item]*destSum
	tried  map[*Item]bool
}

// newDestSums returns the set of streamed sums for one doLarge call; close it before returning.
func (r *run) newDestSums(ctx context.Context) *destSums {
	return &destSums{r: r, ctx: ctx, byItem: map[*Item]*destSum{}, tried: map[*Item]bool{}}
}

// rangeWritten tells it's sum, started now if there is room, that range idx is written.
func (s *destSums) rangeWritten(it *Item, idx int) {
	s.mu.Lock()
	d := s.startLocked(it)
	s.mu.Unlock()
	if d != nil {
		d.rangeDone(idx)
	}
}

// prestart starts the sums of the first of items (as many as there is room for) before any of
// their ranges is written. Started at the first written range instead, a sum's command channel
// was opened while the copy filled the link, behind its queued data (and often on a new
// connection, the streams having taken the pool's channel slots): on 1 Gbit/s × 50 ms with 8
// streams it began 0.66 s after the first range landed, with 200 MiB to catch up on, and the
// transfer waited 0.23 s for it after the last range.
func (s *destSums) prestart(items []*Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		if s.active >= maxDestSums {
			return
		}
		s.startLocked(it)
	}
}

// startLocked returns it's sum, starting it if there is room and it was not tried before.
func (s *destSums) startLocked(it *Item) *destSum {
	d := s.byItem[it]
	if d == nil && !s.tried[it] && s.active < maxDestSums {
		s.tried[it] = true
		if d = s.r.newDestSum(s.ctx, it, &s.wg); d != nil {
			s.byItem[it] = d
			s.active++
		}
	}
	return d
}

// end finishes it's sum, keeping the digest for its verification (see takeDestSum).
func (s *destSums) end(it *Item) {
	s.mu.Lock()
	d := s.byItem[it]
	s.mu.Unlock()
	if d == nil {
		return
	}
	if sum := d.sum(s.ctx, s.r.e.cfg.CommandTimeout); sum != "" {
		s.r.noteDestSum(d.tmp, sum)
	}
	d.close()
	s.mu.Lock()
	delete(s.byItem, it)
	s.active--
	s.mu.Unlock()
}

// close ends every sum still running and waits for their starts.
func (s *destSums) close() {
	s.mu.Lock()
	for _, d := range s.byItem {
		d.close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// destSum is one file's streamed sha256 on the destination.
type destSum struct {
	r     *run
	it    *Item
	tmp   string
	block int64
	part  int64           // the size of a range (the last may be shorter)
	n     int             // the file's number of ranges
	wg    *sync.WaitGroup // the set's: start and the wait for the command's exit

	mu     sync.Mutex
	ready  map[int]bool   // ranges written and not yet fed
	next   int            // the next range to feed
	in     io.WriteCloser // the command's stdin; nil until it started
	sess   *sshpool.Session
	failed bool
	closed bool

	started chan struct{} // closed when start has ended, successfully or not
	exited  chan struct{} // closed when the command has exited
	out     limitedBuffer
}

// newDestSum starts a streamed sum of it's temporary file in the background (ranges already
// written count as written), or returns nil when the transfer does not verify with sha256 or
// its ranges do not fall on dd blocks. wg tracks its goroutines; close the sum before wg.Wait.
func (r *run) newDestSum(ctx context.Context, it *Item, wg *sync.WaitGroup) *destSum {
	block := destSumBlock(r.t.ChunkSize)
	if r.t.Verify != VerifySHA256 || block == 0 {
		return nil
	}
	d := &destSum{
		r: r, it: it, tmp: tempName(it.Destination, r.t.ID), block: block, part: r.t.ChunkSize, n: rangesOf(it.Size, r.t.ChunkSize), wg: wg,
		ready: map[int]bool{}, started: make(chan struct{}), exited: make(chan struct{}),
		out: limitedBuffer{max: 4 << 10},
	}
	r.mu.Lock()
	for idx := range r.ranges[it.Seq] {
		d.ready[idx] = true
	}
	r.mu.Unlock()
	wg.Go(func() { d.start(ctx) })
	return d
}

// start opens the command channel and runs the script, then feeds what is ready.
func (d *destSum) start(ctx context.Context) {
	defer close(d.started)
	fail := func() {
		d.mu.Lock()
		d.failed = true
		d.mu.Unlock()
	}
	octx, cancel := context.WithTimeout(ctx, d.r.e.cfg.OpenTimeout)
	sess, err := d.r.e.pool.NewSession(octx, d.r.dst.Target)
	cancel()
	if err != nil {
		fail()
		return
	}
	in, err := sess.StdinPipe()
	if err != nil {
		_ = sess.Close()
		fail()
		return
	}
	sess.Stdout, sess.Stderr = &d.out, io.Discard
	if err := sess.Start(digest.StreamScript(digest.SHA256, d.tmp, d.block)); err != nil {
		_ = sess.Close()
		fail()
		return
	}
	d.wg.Go(func() {
		_ = sess.Wait()
		close(d.exited)
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed { // closed while starting
		_ = sess.Close()
		d.failed = true
		return
	}
	d.sess, d.in = sess, in
	d.feedLocked()
}

// rangeDone tells the sum that range idx is written (nothing on a nil sum).
func (d *destSum) rangeDone(idx int) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if idx >= d.next {
		d.ready[idx] = true
	}
	d.feedLocked()
}

// feedLocked hands the command every range that now continues the fed prefix.
func (d *destSum) feedLocked() {
	if d.in == nil || d.failed {
		return
	}
	for d.ready[d.next] {
		n := max(0, min(d.part, d.it.Size-int64(d.next)*d.part))
		if _, err := io.WriteString(d.in, digest.StreamLine((n+d.block-1)/d.block)); err != nil {
			d.failed = true
			return
		}
		delete(d.ready, d.next)
		d.next++
	}
}

// sum ends the hash once every range has been fed and returns the digest, or "" when there is
// none to trust (then the caller hashes the finished file). It waits at most timeout; a command
// that has not even started yet is not waited for, as hashing the file afresh is as quick.
func (d *destSum) sum(ctx context.Context, timeout time.Duration) string {
	select {
	case <-d.started:
	default:
		return ""
	}
	d.mu.Lock()
	if d.failed || d.closed || d.next < d.n {
		d.mu.Unlock()
		return ""
	}
	err := d.in.Close()
	d.mu.Unlock()
	if err != nil {
		return ""
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-d.exited:
	case <-t.C:
		return ""
	case <-ctx.Done():
		return ""
	}
	return digest.ParseStreamOutput(digest.SHA256, d.out.String())
}

// close ends the command (if it still runs) and gives its channel back.
func (d *destSum) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.sess != nil {
		_ = d.sess.Close()
	}
}

// noteDestSum keeps the streamed digest of temporary file tmp for its verification.
func (r *run) noteDestSum(tmp, sum string) { r.destSums.Store(tmp, sum) }

// takeDestSum returns and forgets the streamed digest of temporary file tmp, or "".
func (r *run) takeDestSum(tmp string) string {
	v, ok := r.destSums.LoadAndDelete(tmp)
	if !ok {
		return ""
	}
	return v.(string)
}

// limitedBuffer keeps the first max bytes written to it and discards the rest.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
