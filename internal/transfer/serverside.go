package transfer

import (
	"context"
)

// doServerSide copies files within one system with cp on the server, in batches, then verifies
// and renames them like any other copy.
func (r *run) doServerSide(ctx context.Context, files []*Item) error {
	if len(files) == 0 {
		return nil
	}
	s := r.streams[0]
	return runBatches(batches(files, r.e.cfg.BatchFiles), 4, func(_ int, batch []*Item) error {
		if ctx.Err() != nil {
			return nil
		}
		if err := r.recheck(ctx); err != nil { // as before every range: a revoked grant stops here
			return err
		}
		r.mu.Lock()
		pairs := make([]copyPair, len(batch))
		for i, it := range batch {
			it.Attempts++
			it.staged = true
			pairs[i] = copyPair{src: it.Source, dst: tempName(it.Destination, r.t.ID)}
		}
		r.mu.Unlock()
		if err := r.save(ctx, batch); err != nil {
			return err
		}
		failed, err := cpBatch(ctx, r.srcR, pairs, r.e.cfg.CommandTimeout)
		var ok []*Item
		for i, it := range batch {
			switch {
			case err != nil:
				r.itemFailed(ctx, it, err)
			case failed[i] != nil:
				r.itemFailed(ctx, it, failed[i])
			default:
				ok = append(ok, it)
			}
		}
		r.verifyAndFinalize(ctx, s, ok, true, nil)
		return r.save(ctx, batch)
	})
}
