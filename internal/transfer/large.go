package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sync"
	"sync/atomic"
)

// resize adopts a changed source size and modification time for an item that has no finished
// ranges.
func (r *run) resize(it *Item, fi os.FileInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fi.Size() != it.Size {
		r.bytesTotal.Add(fi.Size() - it.Size)
		it.Size = fi.Size()
	}
	it.mtime = fi.ModTime().Unix()
	it.mode = uint32(fi.Mode().Perm())
}

// blockSize is the size of one pipelined read or write. Each of a stream's blocksInFlight
// goroutines reads a block and then writes it, so about half are reading and half writing at any
// time: 16 keep both channels' 2 MiB windows full (measured at 50 ms RTT: 8 gave 11 MiB/s per
// stream, 16 and 32 both about 27 MiB/s). It is the largest SFTP read and write OpenSSH's
// sftp-server takes (its limits@openssh.com: 261,120 bytes, what the pool's SFTP clients use
// there), so a block is one request each way; at 256 KiB every block was two (255 KiB and
// 1 KiB). With servers that take 32 KiB a block is eight, as before.
const (
	blockSize      = 255 << 10
	blocksInFlight = 16
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, blockSize); return &b }}

// copyRange copies n bytes at off from sf to df with blocksInFlight blocks in flight.
func (r *run) copyRange(ctx context.Context, sf io.ReaderAt, df io.WriterAt, off, n int64, name string) error {
	if n == 0 {
		return nil
	}
	r.copying.Add(1)
	defer r.copying.Add(-1)
	var next atomic.Int64
	var failed atomic.Bool
	var first error
	var once sync.Once
	var written atomic.Int64
	fail := func(err error) {
		once.Do(func() { first = err })
		failed.Store(true)
	}
	var wg sync.WaitGroup
	for range min(int64(blocksInFlight), (n+blockSize-1)/blockSize) {
		wg.Go(func() {
			bp := bufPool.Get().(*[]byte)
			defer bufPool.Put(bp)
			for !failed.Load() {
				if ctx.Err() != nil {
					fail(context.Cause(ctx))
					return
				}
				o := next.Add(blockSize) - blockSize
				if o >= n {
					return
				}
				b := (*bp)[:min(blockSize, n-o)]
				k, err := sf.ReadAt(b, off+o)
				r.bytesRead.Add(int64(k))
				r.e.metrics.bytesRead.Add(float64(k))
				if k < len(b) {
					if err == nil || errors.Is(err, io.EOF) {
						err = fmt.Errorf("source %s is shorter than %d bytes: it changed during the transfer", name, off+n)
					}
					fail(fmt.Errorf("read %s: %w", name, err))
					return
				}
				if _, err := df.WriteAt(b, off+o); err != nil {
					fail(fmt.Errorf("write: %w", err))
					return
				}
				written.Add(int64(len(b)))
				r.inflight.Add(int64(len(b)))
			}
		})
	}
	wg.Wait()
	r.inflight.Add(-written.Load())
	return first
}

// doLarge moves multi-range files: every unfinished range is a task; each stream works one task
// at a time, so a fault loses at most one range per stream. The last wave of ranges (one per
// stream) is cut into tailParts parts, so streams that run out of work early do not leave the
// last ranges to one stream each. A file whose last range lands is verified and renamed while
// other ranges keep flowing.
func (r *run) doLarge(ctx context.Context, large []*Item) error {
	if len(large) == 0 {
		return nil
	}
	type fileState struct {
		remaining atomic.Int64
		mu        sync.Mutex
		err       error
	}
	states := map[*Item]*fileState{}
	var tasks []*rangeTask
	r.attempt(large)
	for _, it := range large {
		if ctx.Err() != nil {
			return nil
		}
		if err := r.prepare(ctx, r.streams[0], it); err != nil {
			if isDBErr(err) {
				return err
			}
			r.streams[0].fail(err)
			r.itemFailed(ctx, it, err)
			continue
		}
		st := &fileState{}
		r.mu.Lock()
		for idx := range rangesOf(it.Size, r.t.ChunkSize) {
			if !r.ranges[it.Seq][idx] {
				tasks = append(tasks, &rangeTask{it: it, idx: idx, off: int64(idx) * r.t.ChunkSize, n: r.rangeLen(it, idx), rs: &rangeState{}})
				st.remaining.Add(1)
			}
		}
		r.mu.Unlock()
		states[it] = st
	}
	tasks = splitTail(tasks, len(r.streams))
	defer r.startSourceSums(ctx, prepared(large, states))()
	sums := r.newDestSums(ctx)
	defer sums.close()
	sums.prestart(prepared(large, states))
	ch := make(chan *rangeTask, len(tasks))
	for _, t := range tasks {
		ch <- t
	}
	close(ch)
	finalCh := make(chan *Item, len(states))
	for it, st := range states {
		if st.remaining.Load() == 0 { // every range was done before: only verification is left
			finalCh <- it
		}
	}
	var dbErr atomic.Pointer[error]
	// finish ends task t with err (nil: its part is written); the range's last part records the
	// range, and the file's last range hands the file to the finishers.
	finish := func(t *rangeTask, err error) {
		err, last := t.rs.partDone(err)
		if !last {
			return
		}
		if err == nil {
			if err = r.rangeDone(ctx, t.it, t.idx); isDBErr(err) {
				dbErr.Store(&err)
			}
		}
		st := states[t.it]
		if err != nil {
			st.mu.Lock()
			if st.err == nil {
				st.err = err
			}
			st.mu.Unlock()
		} else {
			sums.rangeWritten(t.it, t.idx)
		}
		if st.remaining.Add(-1) == 0 {
			if st.err != nil {
				r.itemFailed(ctx, t.it, st.err)
				if err := r.save(ctx, []*Item{t.it}); err != nil {
					dbErr.Store(&err)
				}
				return
			}
			finalCh <- t.it
		}
	}
	// Finishers verify and rename files whose ranges are all written.
	var fwg sync.WaitGroup
	for range 2 {
		fwg.Go(func() {
			for it := range finalCh {
				if ctx.Err() != nil {
					continue
				}
				sums.end(it)
				verr := r.verifyAndFinalize(ctx, r.streams[0], []*Item{it}, false, nil)
				if errors.Is(verr[it], errMismatch) {
					if err := r.resetItem(ctx, it); err != nil {
						dbErr.Store(&err)
					}
				}
				if err := r.save(ctx, []*Item{it}); err != nil {
					dbErr.Store(&err)
				}
			}
		})
	}
	var swg sync.WaitGroup
	for _, s := range r.streams {
		swg.Go(func() {
			defer s.closeFiles()
			for t := range ch {
				if ctx.Err() != nil {
					finish(t, context.Cause(ctx))
					continue
				}
				err := r.copyPart(ctx, s, t)
				if isDBErr(err) {
					dbErr.Store(&err)
				}
				finish(t, err)
				if err != nil && s.dead() {
					return // this stream cannot reopen; the others take the remaining ranges
				}
			}
		})
	}
	swg.Wait()
	for t := range ch { // every stream died: fail what is left for this round
		err := r.lastError()
		if err == nil {
			err = errors.New("no stream could reach the systems")
		}
		finish(t, err)
	}
	close(finalCh)
	fwg.Wait()
	if p := dbErr.Load(); p != nil {
		return *p
	}
	return nil
}

// prepare checks a multi-range file before its ranges move: a changed source or a vanished
// temporary file restarts it from scratch; a new one gets its temporary file, sized in advance.
func (r *run) prepare(ctx context.Context, s *stream, it *Item) error {
	sc, dc, err := s.clients(ctx)
	if err != nil {
		return err
	}
	fi, err := sc.Stat(it.Source)
	if err != nil {
		return fmt.Errorf("source %s: %w", it.Source, err)
	}
	if !fi.Mode().IsRegular() {
		return permanent(fmt.Errorf("source %s is no longer a regular file", it.Source))
	}
	tmp := tempName(it.Destination, r.t.ID)
	r.mu.Lock()
	changed := fi.Size() != it.Size || fi.ModTime().Unix() != it.mtime
	started := len(r.ranges[it.Seq]) > 0
	r.mu.Unlock()
	if started && !changed {
		if tfi, err := dc.Lstat(tmp); err != nil || !tfi.Mode().IsRegular() || tfi.Size() != it.Size {
			r.e.log.Info("transfer: temporary file missing or resized; restarting the file", "id", r.t.ID, "file", it.Source)
			changed = true
		}
	}
	if changed {
		if started {
			r.e.log.Info("transfer: source changed; restarting the file", "id", r.t.ID, "file", it.Source)
		}
		if err := r.resetItem(ctx, it); err != nil {
			return err
		}
		r.resize(it, fi)
		started = false
	}
	if started {
		return nil
	}
	r.mu.Lock()
	it.staged = true
	r.mu.Unlock()
	if err := r.save(ctx, []*Item{it}); err != nil {
		return err
	}
	// The owner-only fchmod and the truncate to the file's size are in flight together: one
	// round trip after the create instead of two.
	f, chmodded, err := createTempNoWait(dc, tmp)
	if err != nil {
		return noSpaceOn(dc, path.Dir(tmp), err)
	}
	err = f.Truncate(it.Size)
	if cerr := chmodded(); cerr != nil {
		_ = f.Close()
		_ = dc.Remove(tmp)
		return cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size %s: %w", tmp, err)
	}
	return nil
}

// resetItem forgets an item's finished ranges.
func (r *run) resetItem(ctx context.Context, it *Item) error {
	if err := r.e.db.resetRanges(context.WithoutCancel(ctx), r.t.ID, it.Seq); err != nil {
		return dbe(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var lost int64
	for idx := range r.ranges[it.Seq] {
		lost += r.rangeLen(it, idx)
	}
	delete(r.ranges, it.Seq)
	r.bytesDone.Add(-lost)
	it.BytesDone = 0
	return nil
}

// copyPart copies task t's part of its range over stream s.
func (r *run) copyPart(ctx context.Context, s *stream, t *rangeTask) error {
	if err := r.recheck(ctx); err != nil {
		return err
	}
	sf, df, err := s.files(ctx, t.it, tempName(t.it.Destination, r.t.ID))
	if err != nil {
		s.fail(err)
		return err
	}
	if err := r.copyRange(ctx, sf, df, t.off, t.n, t.it.Source); err != nil {
		err = r.noSpace(ctx, s, t.it.Destination, err)
		s.closeFiles()
		s.fail(err)
		return err
	}
	return nil
}

// rangeDone records range idx of it as written, here and in the database.
func (r *run) rangeDone(ctx context.Context, it *Item, idx int) error {
	n := r.rangeLen(it, idx)
	r.mu.Lock()
	if r.ranges[it.Seq] == nil {
		r.ranges[it.Seq] = map[int]bool{}
	}
	r.ranges[it.Seq][idx] = true
	var done int64
	for i := range r.ranges[it.Seq] {
		done += r.rangeLen(it, i)
	}
	it.BytesDone = done
	r.mu.Unlock()
	r.bytesDone.Add(n)
	r.e.metrics.bytesWritten.Add(float64(n))
	st, err := r.e.db.rangeDone(context.WithoutCancel(ctx), r.t.ID, it.Seq, idx, done, r.bytesRead.Load())
	if err != nil {
		return dbe(err)
	}
	if st == StatusCanceled { // canceled through any instance: write no further range
		r.cancel(errUserCanceled)
		return context.Cause(r.ctx)
	}
	return nil
}

// tailParts is how many parts each range of a run's last wave is cut into.
const tailParts = 4

// rangeTask is one part of a range for a stream to copy: the whole range, or a part of a range
// of the last wave.
type rangeTask struct {
	it     *Item
	idx    int
	off, n int64       // the bytes of the file this task copies
	rs     *rangeState // shared by the range's parts
}

// rangeState collects the outcome of a range's parts.
type rangeState struct {
	mu    sync.Mutex
	parts int // parts not yet done; 0 means one (a range that was not cut)
	err   error
}

// partDone notes that one part ended with err, and reports whether it was the range's last,
// with the first error of its parts.
func (s *rangeState) partDone(err error) (error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && s.err == nil {
		s.err = err
	}
	if s.parts > 1 {
		s.parts--
		return nil, false
	}
	return s.err, true
}

// splitTail cuts each of the last streams tasks (whole ranges, in order) into tailParts parts
// of whole blocks, the parts of each range queued one after another.
func splitTail(tasks []*rangeTask, streams int) []*rangeTask {
	if streams < 2 || len(tasks) == 0 {
		return tasks
	}
	head := tasks[:max(0, len(tasks)-streams)]
	out := append([]*rangeTask(nil), head...)
	for _, t := range tasks[len(head):] {
		blocks := (t.n + blockSize - 1) / blockSize
		parts := min(int64(tailParts), blocks)
		if parts < 2 {
			out = append(out, t)
			continue
		}
		per := (blocks + parts - 1) / parts * blockSize
		for off := int64(0); off < t.n; off += per {
			out = append(out, &rangeTask{it: t.it, idx: t.idx, off: t.off + off, n: min(per, t.n-off), rs: t.rs})
			t.rs.parts++
		}
	}
	return out
}
