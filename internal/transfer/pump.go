package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/pkg/sftp"
)

// A stream's blocks flow through one pipeline across its ranges. Copying range after range,
// each with its own blocksInFlight workers, drained the pipeline at every range's end: the
// stream waited for its last block's write to be acknowledged (a round trip on each side)
// before the next range's first read went out. With equal ranges every stream of a run drains
// at the same moment, so the link idled for a couple of round trips every 16 MiB per stream;
// measured on 1 Gbit/s × 50 ms with 8 streams, the read rate fell from 125 MB/s to 0-40 MB/s
// at each wave's end, about 0.6 s of a 2.8 s copy. Now a worker that finds the current range's
// blocks all taken opens the next range (the stream's next task) and goes on, while the last
// blocks of the previous one are still on the wire; a range is finished when its last block is
// written.

// pumpTask is one task being copied by a stream's pump.
type pumpTask struct {
	t      *rangeTask
	sf     *sftp.File
	df     io.WriterAt
	next   int64 // offset within the task of the next block to take
	taken  bool  // every block has been taken (or the task failed)
	active int   // blocks taken and not yet done
	err    error
	wrote  int64
}

// pump copies the tasks from ch over stream s with blocksInFlight blocks in flight, across task
// boundaries, calling finish once per task (nil: its part is written). It returns when ch is
// drained or the stream cannot go on (a failed task whose stream then cannot reopen).
func (r *run) pump(ctx context.Context, s *stream, ch <-chan *rangeTask, finish func(*rangeTask, error)) {
	var mu sync.Mutex
	var cur *pumpTask
	var stopped bool // the stream died or ch is drained: take no further task
	// done ends task p once its last block is done, under mu.
	done := func(p *pumpTask) {
		err := p.err
		if err != nil {
			err = r.noSpace(ctx, s, p.t.it.Destination, err)
			s.closeFiles()
			s.fail(err)
		}
		mu.Unlock()
		finish(p.t, err) // records the range's bytes as done before they leave inflight
		r.inflight.Add(-p.wrote)
		r.copying.Add(-1)
		mu.Lock()
		if err != nil && s.dead() {
			stopped = true // this stream cannot reopen; the others take the remaining ranges
		}
	}
	// take returns the next block to copy: its task and offset within the task; nil when
	// there is none. Called with mu held.
	take := func() (*pumpTask, int64) {
		for {
			if cur != nil && !cur.taken {
				if cur.err != nil {
					cur.taken = true
					continue
				}
				o := cur.next
				cur.next += blockSize
				cur.active++
				if cur.next >= cur.t.n {
					cur.taken = true
				}
				return cur, o
			}
			if stopped {
				return nil, 0
			}
			t, ok := <-ch
			if !ok {
				stopped = true
				return nil, 0
			}
			if ctx.Err() != nil {
				mu.Unlock()
				finish(t, context.Cause(ctx))
				mu.Lock()
				continue
			}
			p, err := r.openTask(ctx, s, t)
			if err != nil {
				mu.Unlock()
				finish(t, err)
				mu.Lock()
				if s.dead() {
					stopped = true
				}
				continue
			}
			r.copying.Add(1)
			if cur != nil && cur.active > 0 {
				r.e.metrics.overlapped.Inc()
			}
			cur = p
			if p.t.n == 0 {
				p.taken = true
				done(p)
			}
		}
	}
	var wg sync.WaitGroup
	for range blocksInFlight {
		wg.Go(func() {
			bp := bufPool.Get().(*[]byte)
			defer bufPool.Put(bp)
			mu.Lock()
			defer mu.Unlock()
			for {
				p, o := take()
				if p == nil {
					return
				}
				mu.Unlock()
				n, err := r.copyBlock(ctx, p, (*bp)[:min(blockSize, p.t.n-o)], o)
				mu.Lock()
				p.active--
				p.wrote += n
				if err != nil && p.err == nil {
					p.err = err
				}
				if p.taken && p.active == 0 {
					done(p)
				}
			}
		})
	}
	wg.Wait()
}

// openTask opens task t's files on stream s.
func (r *run) openTask(ctx context.Context, s *stream, t *rangeTask) (*pumpTask, error) {
	if err := r.recheck(ctx); err != nil {
		return nil, err
	}
	sf, df, err := s.files(ctx, t.it, tempName(t.it.Destination, r.t.ID))
	if err != nil {
		s.fail(err)
		return nil, err
	}
	return &pumpTask{t: t, sf: sf, df: df}, nil
}

// copyBlock copies the block of p's task at offset o (within the task) through b and returns
// the bytes written.
func (r *run) copyBlock(ctx context.Context, p *pumpTask, b []byte, o int64) (int64, error) {
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	off := p.t.off + o
	k, err := p.sf.ReadAt(b, off)
	r.bytesRead.Add(int64(k))
	r.e.metrics.bytesRead.Add(float64(k))
	if k < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("source %s is shorter than %d bytes: it changed during the transfer", p.t.it.Source, p.t.off+p.t.n)
		}
		return 0, fmt.Errorf("read %s: %w", p.t.it.Source, err)
	}
	if _, err := p.df.WriteAt(b, off); err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	r.inflight.Add(int64(len(b)))
	return int64(len(b)), nil
}
