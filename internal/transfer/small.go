package transfer

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
)

// batches cuts items into groups of at most n.
func batches(items []*Item, n int) [][]*Item {
	var out [][]*Item
	for len(items) > 0 {
		k := min(n, len(items))
		out = append(out, items[:k])
		items = items[k:]
	}
	return out
}

// runBatches runs fn for every batch on nworkers goroutines; worker w passes its index.
func runBatches(bs [][]*Item, nworkers int, fn func(w int, b []*Item) error) error {
	ch := make(chan []*Item)
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for w := range max(1, min(nworkers, len(bs))) {
		wg.Go(func() {
			for b := range ch {
				if err := fn(w, b); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for _, b := range bs {
		ch <- b
	}
	close(ch)
	wg.Wait()
	return first
}

// doSmall copies single-range files in batches: each batch's files are copied at once (through
// tar where it works, see tarsmall.go; over SFTP otherwise), verified with one sha256sum per
// side, and renamed into place.
func (r *run) doSmall(ctx context.Context, small []*Item) error {
	if len(small) == 0 {
		return nil
	}
	p := r.startSmall(ctx)
	for _, b := range p.cut(small) {
		p.put(b)
	}
	return p.wait()
}

// smallPool copies batches of small files on a fixed set of workers (tarWorkers of them with
// tar, otherwise max(4, streams)); put hands a batch to the next free worker, so at most that
// many batches are in flight and a producer waits for room. Start it with startSmall; wait
// ends it.
type smallPool struct {
	r      *run
	ctx    context.Context
	useTar bool
	ch     chan []*Item
	wg     sync.WaitGroup
	once   sync.Once
	first  error
}

// startSmall starts the workers of a smallPool for this round.
func (r *run) startSmall(ctx context.Context) *smallPool {
	p := &smallPool{r: r, ctx: ctx, ch: make(chan []*Item)}
	p.useTar = !r.tarOff.Load() && r.srcR.pool != nil && r.dstR.pool != nil
	nw := max(4, len(r.streams))
	if p.useTar {
		nw = r.tarWorkers()
	}
	for w := range nw {
		p.wg.Go(func() {
			for b := range p.ch {
				if err := r.smallBatch(ctx, w, b, p.useTar); err != nil {
					p.once.Do(func() { p.first = err })
				}
			}
		})
	}
	return p
}

// cut cuts items into the pool's batches (tar batches or sha256sum batches).
func (p *smallPool) cut(items []*Item) [][]*Item {
	if p.useTar {
		return tarBatches(items, tarBatchMaxFactor*p.r.e.cfg.BatchFiles)
	}
	return batches(items, p.r.e.cfg.BatchFiles)
}

// put hands b to a worker, waiting until one is free.
func (p *smallPool) put(b []*Item) { p.ch <- b }

// wait lets the workers finish the batches handed to them, ends them and returns the first
// error (of the database) a batch returned.
func (p *smallPool) wait() error {
	close(p.ch)
	p.wg.Wait()
	return p.first
}

// smallBatch copies one batch of small files on worker w. A small file is a single range, so
// the batch first asks whether the ends may still be used, as every range does: a revoked
// grant stops the transfer at its next batch, not at the end of the round.
func (r *run) smallBatch(ctx context.Context, w int, batch []*Item, useTar bool) error {
	if ctx.Err() != nil {
		return nil
	}
	if err := r.recheck(ctx); err != nil {
		return err
	}
	s := r.streams[w%len(r.streams)]
	r.mu.Lock()
	for _, it := range batch {
		it.Attempts++
		it.staged = true
	}
	r.mu.Unlock()
	if err := r.stage(ctx, batch); err != nil {
		return err
	}
	copied, failed := make([]bool, len(batch)), make([]bool, len(batch))
	var done map[*Item]attrsDone
	if useTar && !r.tarOff.Load() {
		done = r.tarSmall(ctx, batch, copied, failed)
	}
	var rest []*Item
	var restIdx []int
	for i, it := range batch {
		if !copied[i] && !failed[i] {
			rest, restIdx = append(rest, it), append(restIdx, i)
		}
	}
	forEach(rest, r.e.cfg.SmallFileConcurrency, func(i int, it *Item) {
		if err := r.copySmall(ctx, s, it); err != nil {
			s.fail(err)
			r.itemFailed(ctx, it, err)
			return
		}
		copied[restIdx[i]] = true
	})
	var ok []*Item
	for i, it := range batch {
		if copied[i] {
			ok = append(ok, it)
		}
	}
	r.verifyAndFinalize(ctx, s, ok, true, done)
	return r.saveChunked(ctx, batch)
}

// saveChunked saves items BatchFiles at a time: a tar batch's thousand items in one transaction
// would hold SQLite's one connection long enough under load to delay the run's heartbeat.
func (r *run) saveChunked(ctx context.Context, items []*Item) error {
	for _, b := range batches(items, r.e.cfg.BatchFiles) {
		if err := r.save(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// tarSmall moves batch's files that may go through tar with one tar batch, setting copied[i]
// for those it wrote, with the attributes they got (the map returned); a full
// destination fails the others with ErrNoSpace (failed[i]), other failures leave them to the
// SFTP path.
func (r *run) tarSmall(ctx context.Context, batch []*Item, copied, failed []bool) map[*Item]attrsDone {
	var via []*Item
	var idx []int
	for i, it := range batch {
		if tarable(it) {
			via, idx = append(via, it), append(idx, i)
		}
	}
	if len(via) == 0 {
		return nil
	}
	for _, it := range via {
		r.tarSums.Delete(it.Source) // a sum from an earlier batch is not this copy's
	}
	moved, err := r.tarBatch(ctx, via)
	done := make(map[*Item]attrsDone, len(via))
	defer func() { r.e.metrics.tarFiles.Add(float64(len(done))) }()
	for j, m := range moved {
		if m != 0 {
			copied[idx[j]] = true
			done[via[j]] = m
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrNoSpace):
		for j, it := range via {
			if moved[j] == 0 {
				r.itemFailed(ctx, it, err)
				failed[idx[j]] = true
			}
		}
	case ctx.Err() != nil:
	default:
		r.e.log.Info("transfer: tar batch incomplete; the rest goes over SFTP", "id", r.t.ID, "files", len(via), "moved", len(done), "err", err)
	}
	return done
}

// copySmall copies one file to its temporary name over stream s.
func (r *run) copySmall(ctx context.Context, s *stream, it *Item) error {
	sc, dc, err := s.clients(ctx)
	if err != nil {
		return err
	}
	sf, err := sc.Open(it.Source)
	if err != nil {
		return fmt.Errorf("open source %s: %w", it.Source, err)
	}
	defer sf.Close()
	fi, err := sf.Stat()
	if err != nil {
		return fmt.Errorf("stat source %s: %w", it.Source, err)
	}
	if !fi.Mode().IsRegular() {
		return permanent(fmt.Errorf("source %s is no longer a regular file", it.Source))
	}
	r.resize(it, fi)
	tmp := tempName(it.Destination, r.t.ID)
	df, err := createTemp(dc, tmp)
	if err != nil {
		return noSpaceOn(dc, path.Dir(tmp), err)
	}
	err = r.copyRange(ctx, sf, df, 0, it.Size, it.Source)
	if cerr := df.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", tmp, cerr)
	}
	return noSpaceOn(dc, path.Dir(tmp), err)
}
