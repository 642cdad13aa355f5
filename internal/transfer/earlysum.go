package transfer

import (
	"context"
	"maps"
	"sync"

	"github.com/sshapi/sshapi/internal/digest"
)

// Source checksums overlap the copy. With Verify sha256 a large file's source is summed while
// its ranges are still moving (one file at a time, in copy order), so once the last range
// lands verification waits only for the destination's sum instead of both: on a 2-core system
// pair the source's read and hash run beside the transfer rather than after it. A sum is used
// once; a file copied again (after a mismatch) is summed again after its copy.

// earlySums holds the source sums started ahead of verification, by source path.
type earlySums struct {
	mu   sync.Mutex
	sums map[string]*earlySum
}

// earlySum is one source file's sum: computed once, by whoever asks first.
type earlySum struct {
	once sync.Once
	done chan struct{}
	sum  string
	err  error
}

// compute sums f on the source unless that has already started, then waits.
func (e *earlySum) compute(ctx context.Context, r *run, f digest.File) (string, error) {
	e.once.Do(func() {
		sums, errs, err := sha256Batch(ctx, r.srcR, []digest.File{f}, r.e.cfg.CommandTimeout)
		e.sum, e.err = sums[f.Path], err
		if err == nil && e.sum == "" {
			e.err = errs[f.Path]
		}
		close(e.done)
	})
	select {
	case <-e.done:
		return e.sum, e.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// startSourceSums sums the sources of items one after another in the background while they
// copy, when the transfer verifies with sha256. stop ends the background work and waits for it;
// doLarge calls it once its finishers are done.
func (r *run) startSourceSums(ctx context.Context, items []*Item) (stop func()) {
	if r.t.Verify != VerifySHA256 || len(items) == 0 {
		return func() {}
	}
	r.early.mu.Lock()
	if r.early.sums == nil {
		r.early.sums = map[string]*earlySum{}
	}
	pending := make([]*earlySum, len(items))
	for i, it := range items {
		pending[i] = &earlySum{done: make(chan struct{})}
		r.early.sums[it.Source] = pending[i]
	}
	r.early.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i, it := range items {
			if ctx.Err() != nil {
				return
			}
			_, _ = pending[i].compute(ctx, r, digest.File{Path: it.Source, Size: it.Size})
		}
	})
	return func() {
		cancel()
		wg.Wait()
		r.early.mu.Lock()
		for _, it := range items {
			delete(r.early.sums, it.Source)
		}
		r.early.mu.Unlock()
	}
}

// sourceSHA256 is sha256Batch on the source for files, taking the sums a tar batch computed
// from the stream and those started early where there are any (each only once) and computing
// the rest in one batch.
func (r *run) sourceSHA256(ctx context.Context, files []digest.File) (map[string]string, map[string]error, error) {
	var rest []digest.File
	early := map[digest.File]*earlySum{}
	streamed := map[string]string{}
	r.early.mu.Lock()
	for _, f := range files {
		if s, ok := r.tarSums.LoadAndDelete(f.Path); ok {
			streamed[f.Path] = s.(string)
			continue
		}
		if e := r.early.sums[f.Path]; e != nil {
			early[f] = e
			delete(r.early.sums, f.Path)
		} else {
			rest = append(rest, f)
		}
	}
	r.early.mu.Unlock()
	sums, errs, err := map[string]string{}, map[string]error{}, error(nil)
	if len(rest) > 0 {
		if sums, errs, err = sha256Batch(ctx, r.srcR, rest, r.e.cfg.CommandTimeout); err != nil {
			return nil, nil, err
		}
	}
	maps.Copy(sums, streamed)
	for f, e := range early {
		sum, serr := e.compute(ctx, r, f)
		switch {
		case sum != "":
			sums[f.Path] = sum
		case serr != nil && ctx.Err() != nil:
			return nil, nil, serr
		default:
			errs[f.Path] = serr
		}
	}
	return sums, errs, nil
}

// prepared returns the items of large that have a state, in large's order.
func prepared[S any](large []*Item, states map[*Item]S) []*Item {
	var out []*Item
	for _, it := range large {
		if _, ok := states[it]; ok {
			out = append(out, it)
		}
	}
	return out
}
