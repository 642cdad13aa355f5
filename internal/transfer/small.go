package transfer

import (
	"context"
	"fmt"
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

// doSmall copies single-range files in batches: each batch's files are copied at once, verified
// with one sha256sum per side, and renamed into place.
func (r *run) doSmall(ctx context.Context, small []*Item) error {
	if len(small) == 0 {
		return nil
	}
	nw := max(4, len(r.streams))
	return runBatches(batches(small, r.e.cfg.BatchFiles), nw, func(w int, batch []*Item) error {
		if ctx.Err() != nil {
			return nil
		}
		s := r.streams[w%len(r.streams)]
		r.mu.Lock()
		for _, it := range batch {
			it.Attempts++
			it.staged = true
		}
		r.mu.Unlock()
		if err := r.save(ctx, batch); err != nil {
			return err
		}
		copied := make([]bool, len(batch))
		forEach(batch, r.e.cfg.SmallFileConcurrency, func(i int, it *Item) {
			if err := r.copySmall(ctx, s, it); err != nil {
				s.fail(err)
				r.itemFailed(ctx, it, err)
				return
			}
			copied[i] = true
		})
		var ok []*Item
		for i, it := range batch {
			if copied[i] {
				ok = append(ok, it)
			}
		}
		r.verifyAndFinalize(ctx, s, ok, true)
		return r.save(ctx, batch)
	})
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
		return err
	}
	err = r.copyRange(ctx, sf, df, 0, it.Size, it.Source)
	if cerr := df.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", tmp, cerr)
	}
	return err
}
