package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/digest"
)

// Why a run's context ended.
var (
	errUserCanceled = errors.New("canceled by the user")
	errDeadline     = errors.New("deadline exceeded")
	errLeaseLost    = errors.New("another runner took over the transfer")
	// errRequeue tells the worker that the run was interrupted by shutdown and saved its state.
	errRequeue = errors.New("interrupted by shutdown; re-queued")
)

// run is one execution of a transfer on this instance.
type run struct {
	e      *Engine
	t      *Transfer
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	src, dst         System
	srcR, dstR       runner
	srcRoot, dstRoot *confine.Root // root_dir confinement of each system, for this run
	early            earlySums     // source sums started while large files copy

	mu      sync.Mutex // guards items' fields, ranges, lastErr and the rate sample
	items   []*Item
	ranges  map[int64]map[int]bool
	lastErr error
	checked map[int64]bool // files whose sync level was checked in this run

	streams []*stream

	bytesTotal, bytesDone, bytesRead, inflight       atomic.Int64
	filesTotal, filesDone, filesFailed, filesSkipped atomic.Int64
	nstreams                                         atomic.Int64
	rateBits                                         atomic.Uint64
	sampleAt                                         time.Time
	sampleBytes                                      int64
	startAt                                          time.Time
	startBytes                                       int64
	copying                                          atomic.Int64 // copyRange calls in progress
	slow                                             slowWatch    // heartbeat's throughput window
}

// runTransfer runs (or resumes) transfer id until it finishes, fails, is canceled, or the engine
// stops (errRequeue). Only errors that River should retry (the database failing) are returned.
func (e *Engine) runTransfer(parent context.Context, id string) error {
	t, err := e.db.get(parent, "", id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.Status.Terminal() {
		return nil
	}
	now := time.Now()
	lease, err := e.db.acquireLease(parent, id, e.instance, now, now.Add(e.cfg.LeaseTTL), e.cfg.MaxRunningPerOwner)
	switch {
	case err != nil:
		return err
	case lease == LeaseOwnerBusy:
		return errOwnerBusy
	case lease != LeaseAcquired:
		e.log.Info("transfer already has a runner; duplicate job ignored", "id", id)
		return nil
	}
	t.Attempts++
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, t.Deadline, errDeadline)
	defer cancelDeadline()
	r := &run{e: e, t: t, ctx: ctx, cancel: cancel, done: make(chan struct{}), checked: map[int64]bool{}}
	r.bytesTotal.Store(t.BytesTotal)
	r.bytesDone.Store(t.BytesDone)
	r.bytesRead.Store(t.BytesRead)
	r.filesTotal.Store(t.FilesTotal)
	r.nstreams.Store(int64(t.Streams))
	e.mu.Lock()
	e.runs[id] = r
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.runs, id)
		e.mu.Unlock()
		close(r.done)
	}()
	e.log.Info("transfer run started", "id", id, "attempt", t.Attempts)

	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		r.heartbeat(hbCtx)
	}()
	err = r.execute(ctx)
	stopHB()
	<-hbDone
	r.closeStreams()
	return r.slowDone(r.conclude(parent, err))
}

// conclude records how the run ended.
func (r *run) conclude(parent context.Context, err error) error {
	e := r.e
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 2*time.Minute)
	defer cancel()
	cause := context.Cause(r.ctx)
	now := time.Now()
	fail := func(msg string) error {
		r.cleanup(ctx)
		e.metrics.runs.WithLabelValues("failed").Inc()
		e.log.Warn("transfer failed", "id", r.t.ID, "err", msg)
		return e.db.finish(ctx, r.t.ID, e.instance, StatusFailed, msg, r.progress(), now)
	}
	switch {
	case errors.Is(cause, errLeaseLost):
		e.metrics.runs.WithLabelValues("lease_lost").Inc()
		return nil
	case errors.Is(cause, errUserCanceled):
		r.cleanup(ctx)
		e.metrics.runs.WithLabelValues("canceled").Inc()
		return e.db.finish(ctx, r.t.ID, e.instance, StatusCanceled, "canceled by the user", r.progress(), now)
	case parent.Err() != nil:
		e.metrics.runs.WithLabelValues("requeued").Inc()
		e.log.Info("transfer interrupted by shutdown; progress saved", "id", r.t.ID, "bytes_done", r.bytesDone.Load())
		if err := e.db.finish(ctx, r.t.ID, e.instance, StatusQueued, "", r.progress(), now); err != nil {
			return err
		}
		return errRequeue
	case errors.Is(cause, errTooSlow):
		return r.concludeSlow(ctx, cause, now, fail)
	case errors.Is(cause, errDeadline):
		msg := "deadline exceeded"
		if le := r.lastError(); le != nil {
			msg += "; last error: " + le.Error()
		}
		return fail(msg)
	case err != nil && !isPermanent(err) && isDBErr(err):
		// The database failed: leave the lease to expire and let River retry the job.
		return err
	case err != nil:
		return fail(err.Error())
	}
	if n := r.filesFailed.Load(); n > 0 {
		msg := fmt.Sprintf("%d of %d files failed", n, r.filesTotal.Load())
		if le := r.lastError(); le != nil {
			msg += "; last error: " + le.Error()
		}
		return fail(msg)
	}
	p := r.progress()
	if d := time.Since(r.startAt).Seconds(); d > 0 {
		p.rate = float64(p.bytesDone-r.startBytes) / d
	}
	e.metrics.runs.WithLabelValues("succeeded").Inc()
	e.log.Info("transfer succeeded", "id", r.t.ID, "bytes", p.bytesTotal, "files", p.filesTotal, "bytes_read", p.bytesRead)
	return e.db.finish(ctx, r.t.ID, e.instance, StatusSucceeded, "", p, now)
}

// dbError marks errors of the transfer database.
type dbError struct{ err error }

func (e *dbError) Error() string { return e.err.Error() }
func (e *dbError) Unwrap() error { return e.err }

func isDBErr(err error) bool {
	var d *dbError
	return errors.As(err, &d)
}

// dbe wraps a database error so that conclude hands it to River.
func dbe(err error) error {
	if err == nil {
		return nil
	}
	return &dbError{err}
}

func (r *run) lastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

func (r *run) setLastErr(err error) {
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
}

// progress returns the run's live figures.
func (r *run) progress() progress {
	return progress{
		bytesTotal: r.bytesTotal.Load(), bytesDone: r.bytesDone.Load() + r.inflight.Load(), bytesRead: r.bytesRead.Load(),
		filesTotal: r.filesTotal.Load(), filesDone: r.filesDone.Load(), filesFailed: r.filesFailed.Load(),
		filesSkipped: r.filesSkipped.Load(), rate: math.Float64frombits(r.rateBits.Load()), streams: int(r.nstreams.Load()),
	}
}

// heartbeat extends the lease, saves progress and notices cancellation by another instance.
func (r *run) heartbeat(ctx context.Context) {
	interval := min(r.e.cfg.LeaseTTL/3, time.Second)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.sampleRate()
		r.checkRate(time.Now())
		st, held, err := r.e.db.heartbeat(ctx, r.t.ID, r.e.instance, time.Now().Add(r.e.cfg.LeaseTTL), r.progress())
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.e.log.Warn("transfer heartbeat", "id", r.t.ID, "err", err)
			}
		case st == StatusCanceled:
			r.cancel(errUserCanceled)
		case !held:
			r.cancel(errLeaseLost)
		}
	}
}

// sampleRate updates the smoothed transfer rate.
func (r *run) sampleRate() {
	now := time.Now()
	done := r.bytesDone.Load() + r.inflight.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.sampleAt.IsZero() {
		dt := now.Sub(r.sampleAt).Seconds()
		if dt > 0 {
			inst := float64(done-r.sampleBytes) / dt
			old := math.Float64frombits(r.rateBits.Load())
			rate := inst
			if old > 0 {
				rate = 0.6*old + 0.4*inst
			}
			r.rateBits.Store(math.Float64bits(max(rate, 0)))
		}
	}
	r.sampleAt, r.sampleBytes = now, done
}

// sleep waits the backoff for retry n (exponential with jitter), or until ctx ends. The
// transfer shows status retrying, the last error and the next attempt's time meanwhile.
func (r *run) sleep(ctx context.Context, n int) error {
	d := r.e.cfg.RetryBase << min(n, 20)
	d = min(d, r.e.cfg.RetryMax)
	d = d/2 + rand.N(d/2+1)
	msg := "retrying"
	if le := r.lastError(); le != nil {
		msg = le.Error()
	}
	if err := r.e.db.retrying(context.WithoutCancel(ctx), r.t.ID, r.e.instance, msg, time.Now().Add(d)); err != nil {
		return dbe(err)
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// execute plans the transfer if needed and moves its items in rounds until none is pending.
// Transient failures are retried with exponential backoff until the deadline; it returns an
// error only when the whole transfer cannot go on.
func (r *run) execute(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := r.setup(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if isPermanent(err) || isDBErr(err) {
			return err
		}
		r.setLastErr(err)
		r.e.log.Info("transfer setup failed; retrying", "id", r.t.ID, "err", err)
		if err := r.sleep(ctx, attempt); err != nil {
			return err
		}
	}
	if err := r.e.db.resumed(context.WithoutCancel(ctx), r.t.ID, r.e.instance); err != nil {
		return dbe(err)
	}
	r.startAt = time.Now()
	r.startBytes = r.bytesDone.Load()
	for round := 0; ; round++ {
		pending := r.pending()
		if len(pending) == 0 {
			r.finishDirs(ctx)
			return nil
		}
		if round > 0 {
			r.e.log.Info("transfer retrying", "id", r.t.ID, "pending", len(pending), "round", round, "last_err", r.lastError())
			if err := r.sleep(ctx, round-1); err != nil {
				return err
			}
			if err := r.e.db.resumed(context.WithoutCancel(ctx), r.t.ID, r.e.instance); err != nil {
				return dbe(err)
			}
		}
		if err := r.round(ctx, pending); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
}

// setup resolves both systems, opens the first stream, plans the transfer if it has no items
// yet, loads the items and finished ranges, and chooses the number of streams.
func (r *run) setup(ctx context.Context) error {
	var err error
	if r.src, err = r.e.resolve(ctx, r.t.Owner, r.t.Source, false); err != nil {
		return fmt.Errorf("source system %q: %w", r.t.Source.System, err)
	}
	if r.dst, err = r.e.resolve(ctx, r.t.Owner, r.t.Destination, true); err != nil {
		return fmt.Errorf("destination system %q: %w", r.t.Destination.System, err)
	}
	r.srcR = runner{pool: r.e.pool, t: r.src.Target}
	r.dstR = runner{pool: r.e.pool, t: r.dst.Target}
	r.closeStreams()
	r.streams = []*stream{{r: r}}
	sc, dc, err := r.streams[0].clients(ctx)
	if err != nil {
		return err
	}
	if err := r.setupRoots(ctx, sc, dc); err != nil {
		return err
	}
	if !r.t.planned {
		items, err := r.plan(ctx, sc, dc)
		if err != nil {
			return err
		}
		if err := r.e.db.plan(ctx, r.t.ID, items, 0); err != nil {
			return dbe(err)
		}
		r.t.planned = true
	}
	items, err := r.e.db.items(ctx, r.t.ID, -1, 0, "")
	if err != nil {
		return dbe(err)
	}
	ranges, err := r.e.db.ranges(ctx, r.t.ID)
	if err != nil {
		return dbe(err)
	}
	r.items = make([]*Item, len(items))
	var total, done, files, filesDone, failed, skipped int64
	for i := range items {
		it := &items[i]
		r.items[i] = it
		if it.Kind != KindFile {
			continue
		}
		files++
		total += it.Size
		switch it.Status {
		case ItemDone:
			filesDone++
			done += it.Size
		case ItemSkipped:
			filesDone++
			skipped++
			done += it.Size
		case ItemFailed:
			failed++
		case ItemPending:
			for idx := range ranges[it.Seq] {
				done += r.rangeLen(it, idx)
			}
		}
	}
	r.ranges = ranges
	r.bytesTotal.Store(total)
	r.bytesDone.Store(done)
	r.filesTotal.Store(files)
	r.filesDone.Store(filesDone)
	r.filesFailed.Store(failed)
	r.filesSkipped.Store(skipped)

	n := r.t.streamsReq
	if n == 0 {
		n = r.autoStreams(sc, dc)
	}
	if r.t.SameSystem {
		n = 1
	}
	r.nstreams.Store(int64(n))
	for len(r.streams) < n {
		r.streams = append(r.streams, &stream{r: r})
	}
	r.e.log.Info("transfer planned", "id", r.t.ID, "files", files, "bytes", total, "bytes_done", done, "streams", n)
	return nil
}

// autoStreams picks the stream count from the measured round-trip time: enough 2 MiB windows to
// fill the bandwidth-delay product of the assumed link rate.
func (r *run) autoStreams(sc, dc *sftp.Client) int {
	rtt := max(measureRTT(sc), measureRTT(dc))
	n := int(math.Ceil(r.e.cfg.LinkRate * rtt.Seconds() / float64(channelWindow)))
	n = max(r.e.cfg.MinStreams, min(n, r.e.cfg.MaxStreams))
	r.e.log.Info("transfer streams chosen from RTT", "id", r.t.ID, "rtt", rtt, "streams", n)
	return n
}

// channelWindow is the SSH channel window of x/crypto/ssh and OpenSSH: one channel moves at most
// this much per round trip.
const channelWindow = 2 << 20

// measureRTT returns the fastest of a few SFTP round trips.
func measureRTT(c *sftp.Client) time.Duration {
	best := time.Duration(math.MaxInt64)
	for range 3 {
		t0 := time.Now()
		if _, err := c.RealPath("."); err != nil {
			return time.Millisecond
		}
		best = min(best, time.Since(t0))
	}
	return best
}

// rangeLen is the length of range idx of it.
func (r *run) rangeLen(it *Item, idx int) int64 {
	off := int64(idx) * r.t.ChunkSize
	return max(0, min(r.t.ChunkSize, it.Size-off))
}

// pending returns the items still to do.
func (r *run) pending() []*Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Item
	for _, it := range r.items {
		if it.Status == ItemPending {
			out = append(out, it)
		}
	}
	return out
}

// plan walks the source and returns the transfer's items.
func (r *run) plan(ctx context.Context, sc, dc *sftp.Client) ([]Item, error) {
	srcAbs, err := r.srcRoot.Resolve(ctx, sc, r.t.Source.Path, true)
	if err != nil {
		return nil, confined(fmt.Errorf("source: %w", err))
	}
	dstAbs, err := r.dstRoot.Resolve(ctx, dc, r.t.Destination.Path, true)
	if err != nil {
		return nil, confined(fmt.Errorf("destination: %w", err))
	}
	fi, err := sc.Stat(srcAbs)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", srcAbs, err)
	}
	dfi, derr := dc.Stat(dstAbs)
	if derr != nil && !errors.Is(derr, fs.ErrNotExist) {
		return nil, fmt.Errorf("destination %s: %w", dstAbs, derr)
	}
	dstExists := derr == nil
	switch {
	case fi.Mode().IsRegular():
		dst := dstAbs
		if strings.HasSuffix(r.t.Destination.Path, "/") || (dstExists && dfi.IsDir()) {
			dst = path.Join(dstAbs, path.Base(srcAbs))
		}
		if r.t.SameSystem && dst == srcAbs {
			return nil, permanent(fmt.Errorf("destination %s is the source file", dst))
		}
		return []Item{fileItem(0, srcAbs, dst, fi)}, nil
	case fi.IsDir():
		if !r.t.Recursive {
			return nil, permanent(fmt.Errorf("source %s is a directory: set recursive to copy it", srcAbs))
		}
		if dstExists && !dfi.IsDir() {
			return nil, permanent(fmt.Errorf("destination %s exists and is not a directory", dstAbs))
		}
		if r.t.SameSystem && confine.Within(srcAbs, dstAbs) {
			return nil, permanent(fmt.Errorf("destination %s is inside the source %s", dstAbs, srcAbs))
		}
		return walk(ctx, sc, srcAbs, dstAbs)
	}
	return nil, permanent(fmt.Errorf("source %s is not a regular file or directory", srcAbs))
}

func fileItem(seq int64, src, dst string, fi os.FileInfo) Item {
	return Item{Seq: seq, Kind: KindFile, Source: src, Destination: dst, Size: fi.Size(), Status: ItemPending,
		mtime: fi.ModTime().Unix(), mode: uint32(fi.Mode().Perm())}
}

// walk lists the tree under srcRoot (not following symlinks) as items whose destinations are
// under dstRoot; directories come before their contents.
func walk(ctx context.Context, sc *sftp.Client, srcRoot, dstRoot string) ([]Item, error) {
	var items []Item
	w := sc.Walk(srcRoot)
	for w.Step() {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		if err := w.Err(); err != nil {
			return nil, fmt.Errorf("walk %s: %w", w.Path(), err)
		}
		p, fi := w.Path(), w.Stat()
		dst := dstRoot
		if p != srcRoot {
			dst = path.Join(dstRoot, strings.TrimPrefix(p, srcRoot+"/"))
		}
		seq := int64(len(items))
		switch {
		case fi.IsDir():
			items = append(items, Item{Seq: seq, Kind: KindDir, Source: p, Destination: dst, Status: ItemPending, mode: uint32(fi.Mode().Perm())})
		case fi.Mode().IsRegular():
			items = append(items, fileItem(seq, p, dst, fi))
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := sc.ReadLink(p)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", p, err)
			}
			items = append(items, Item{Seq: seq, Kind: KindSymlink, Source: p, Destination: dst, Status: ItemPending, linkTarget: target})
		}
	}
	return items, nil
}

// round tries every pending item once: directories, symlinks, the sync check, then the files.
// Every item is first checked against both systems' root directories.
func (r *run) round(ctx context.Context, pending []*Item) error {
	if err := r.recheck(ctx); err != nil {
		return err
	}
	for _, s := range r.streams {
		s.revive()
	}
	pending, err := r.checkItems(ctx, r.streams[0], pending)
	if err != nil {
		return err
	}
	var dirs, links, small, large []*Item
	for _, it := range pending {
		switch {
		case it.Kind == KindDir:
			dirs = append(dirs, it)
		case it.Kind == KindSymlink:
			links = append(links, it)
		case rangesOf(it.Size, r.t.ChunkSize) == 1:
			small = append(small, it)
		default:
			large = append(large, it)
		}
	}
	if err := r.doDirs(ctx, dirs); err != nil {
		return err
	}
	if err := r.doLinks(ctx, links); err != nil {
		return err
	}
	files := append(append([]*Item(nil), small...), large...)
	if r.t.Sync != SyncAlways {
		if err := r.syncCheck(ctx, files); err != nil {
			return err
		}
	}
	if r.t.SameSystem {
		return r.doServerSide(ctx, stillPending(files))
	}
	if err := r.doSmall(ctx, stillPending(small)); err != nil {
		return err
	}
	return r.doLarge(ctx, stillPending(large))
}

func stillPending(items []*Item) []*Item {
	var out []*Item
	for _, it := range items {
		if it.Status == ItemPending {
			out = append(out, it)
		}
	}
	return out
}

// itemFailed records err for it: permanent errors, and other errors once the item has used its
// attempts, fail the item; a lost connection only ends the round. A run that is stopping
// records nothing.
func (r *run) itemFailed(ctx context.Context, it *Item, err error) {
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
	it.Error = err.Error()
	if isPermanent(err) || (!isConnErr(err) && it.Attempts >= r.e.cfg.MaxItemAttempts) {
		it.Status = ItemFailed
		if it.Kind == KindFile {
			r.filesFailed.Add(1)
		}
	}
}

// itemDone marks it finished.
func (r *run) itemDone(it *Item, sum string, addBytes bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	it.Status, it.Error, it.SHA256, it.staged, it.BytesDone = ItemDone, "", sum, false, it.Size
	if it.Kind == KindFile {
		r.filesDone.Add(1)
		if addBytes {
			r.bytesDone.Add(it.Size)
			r.e.metrics.bytesWritten.Add(float64(it.Size))
		}
	}
}

func (r *run) attempt(items []*Item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		it.Attempts++
	}
}

func (r *run) save(ctx context.Context, items []*Item) error {
	r.mu.Lock()
	cp := make([]*Item, len(items))
	for i, it := range items {
		c := *it
		cp[i] = &c
	}
	r.mu.Unlock()
	return dbe(r.e.db.saveItems(context.WithoutCancel(ctx), r.t.ID, cp))
}

// forEach runs fn for every item with at most n at once.
func forEach(items []*Item, n int, fn func(i int, it *Item)) {
	sem := make(chan struct{}, max(n, 1))
	var wg sync.WaitGroup
	for i, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i, it)
		}()
	}
	wg.Wait()
}

// doDirs creates the destination directories, parents first.
func (r *run) doDirs(ctx context.Context, dirs []*Item) error {
	if len(dirs) == 0 {
		return nil
	}
	r.attempt(dirs)
	byDepth := map[int][]*Item{}
	var depths []int
	for _, d := range dirs {
		n := strings.Count(d.Destination, "/")
		if byDepth[n] == nil {
			depths = append(depths, n)
		}
		byDepth[n] = append(byDepth[n], d)
	}
	sort.Ints(depths)
	for _, depth := range depths {
		level := byDepth[depth]
		forEach(level, 16, func(i int, it *Item) {
			s := r.streams[i%len(r.streams)]
			_, dc, err := s.clients(ctx)
			if err == nil {
				err = mkdir(dc, it.Destination)
			}
			if err == nil && it.mode != 0 {
				err = dc.Chmod(it.Destination, dirMode(it))
			}
			if err != nil {
				s.fail(err)
				r.itemFailed(ctx, it, fmt.Errorf("create directory %s: %w", it.Destination, err))
				return
			}
			r.itemDone(it, "", false)
		})
		if err := r.save(ctx, level); err != nil {
			return err
		}
	}
	return nil
}

// mkdir creates dir (and its parents); an existing directory is fine.
func mkdir(c *sftp.Client, dir string) error {
	err := c.Mkdir(dir)
	if err == nil {
		return nil
	}
	if fi, serr := c.Stat(dir); serr == nil {
		if fi.IsDir() {
			return nil
		}
		return permanent(fmt.Errorf("%s exists and is not a directory", dir))
	}
	if err := c.MkdirAll(dir); err != nil {
		return err
	}
	return nil
}

// doLinks recreates symlinks at the destination (an existing one is replaced only with sync
// "always").
func (r *run) doLinks(ctx context.Context, links []*Item) error {
	if len(links) == 0 {
		return nil
	}
	r.attempt(links)
	forEach(links, 16, func(i int, it *Item) {
		s := r.streams[i%len(r.streams)]
		_, dc, err := s.clients(ctx)
		if err != nil {
			r.itemFailed(ctx, it, err)
			return
		}
		if _, err := dc.Lstat(it.Destination); err == nil {
			if r.t.Sync != SyncAlways {
				r.itemSkipped(it, "")
				return
			}
			_ = dc.Remove(it.Destination)
		}
		if err := dc.Symlink(it.linkTarget, it.Destination); err != nil {
			s.fail(err)
			r.itemFailed(ctx, it, fmt.Errorf("symlink %s: %w", it.Destination, err))
			return
		}
		r.itemDone(it, "", false)
	})
	return r.save(ctx, links)
}

// itemSkipped marks it skipped by the sync level.
func (r *run) itemSkipped(it *Item, sum string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	it.Status, it.Error, it.SHA256 = ItemSkipped, "", sum
	if it.Kind == KindFile {
		it.BytesDone = it.Size
		r.filesSkipped.Add(1)
		r.filesDone.Add(1)
		r.bytesDone.Add(it.Size)
	}
}

// syncCheck skips the files the sync level says are already at the destination. Files with
// finished ranges are past that decision.
func (r *run) syncCheck(ctx context.Context, files []*Item) error {
	var cand []*Item
	r.mu.Lock()
	for _, it := range files {
		if !r.checked[it.Seq] && len(r.ranges[it.Seq]) == 0 {
			cand = append(cand, it)
			r.checked[it.Seq] = true
		}
	}
	r.mu.Unlock()
	if len(cand) == 0 {
		return nil
	}
	stats := make([]os.FileInfo, len(cand))
	forEach(cand, 32, func(i int, it *Item) {
		_, dc, err := r.streams[i%len(r.streams)].clients(ctx)
		if err != nil {
			return
		}
		if fi, err := dc.Stat(it.Destination); err == nil && fi.Mode().IsRegular() {
			stats[i] = fi
		}
	})
	var skip, sumCand []*Item
	for i, it := range cand {
		fi := stats[i]
		if fi == nil {
			continue
		}
		switch r.t.Sync {
		case SyncExists:
			skip = append(skip, it)
		case SyncSize:
			if fi.Size() == it.Size {
				skip = append(skip, it)
			}
		case SyncMtime:
			if fi.Size() == it.Size && fi.ModTime().Unix() == it.mtime {
				skip = append(skip, it)
			}
		case SyncChecksum:
			if fi.Size() == it.Size {
				sumCand = append(sumCand, it)
			}
		}
	}
	for _, it := range skip {
		r.itemSkipped(it, "")
	}
	if len(sumCand) > 0 {
		srcSums, dstSums, _, err := r.sums(ctx, sumCand, func(it *Item) string { return it.Destination })
		if err == nil {
			for _, it := range sumCand {
				if s := srcSums[it.Source]; s != "" && s == dstSums[it.Destination] {
					r.itemSkipped(it, s)
					skip = append(skip, it)
				}
			}
		}
	}
	return r.save(ctx, skip)
}

// sums computes sha256 of the items' sources and of dstPath(item) at the destination, both at
// once. Paths that could not be read are missing from the maps, with their errors in errs.
func (r *run) sums(ctx context.Context, items []*Item, dstPath func(*Item) string) (src, dst map[string]string, errs map[string]error, err error) {
	srcFiles := make([]digest.File, len(items))
	dstFiles := make([]digest.File, len(items))
	for i, it := range items {
		srcFiles[i], dstFiles[i] = digest.File{Path: it.Source, Size: it.Size}, digest.File{Path: dstPath(it), Size: it.Size}
	}
	var srcErrs, dstErrs map[string]error
	var serr, derr error
	var wg sync.WaitGroup
	wg.Go(func() { src, srcErrs, serr = r.sourceSHA256(ctx, srcFiles) })
	wg.Go(func() { dst, dstErrs, derr = sha256Batch(ctx, r.dstR, dstFiles, r.e.cfg.CommandTimeout) })
	wg.Wait()
	if err := errors.Join(serr, derr); err != nil {
		return nil, nil, nil, err
	}
	errs = map[string]error{}
	for p, e := range srcErrs {
		errs["src:"+p] = e
	}
	for p, e := range dstErrs {
		errs["dst:"+p] = e
	}
	return src, dst, errs, nil
}

// verify checks copied temporary files against their sources as the transfer's Verify says. It
// returns each failed item's error; verified items get their sha256 in sums.
func (r *run) verify(ctx context.Context, s *stream, items []*Item) (map[*Item]error, map[*Item]string) {
	errs := map[*Item]error{}
	sums := map[*Item]string{}
	if len(items) == 0 {
		return errs, sums
	}
	tmp := func(it *Item) string { return tempName(it.Destination, r.t.ID) }
	switch r.t.Verify {
	case VerifyNone:
	case VerifySize:
		_, dc, err := s.clients(ctx)
		for _, it := range items {
			if err != nil {
				errs[it] = err
				continue
			}
			fi, serr := dc.Stat(tmp(it))
			switch {
			case serr != nil:
				errs[it] = fmt.Errorf("verify %s: %w", tmp(it), serr)
			case fi.Size() != it.Size:
				errs[it] = fmt.Errorf("%w: %s has %d bytes, source %d", errMismatch, tmp(it), fi.Size(), it.Size)
			}
		}
	case VerifySHA256:
		src, dst, perr, err := r.sums(ctx, items, tmp)
		for _, it := range items {
			switch {
			case err != nil:
				errs[it] = fmt.Errorf("verify: %w", err)
			case src[it.Source] == "":
				errs[it] = fmt.Errorf("verify source: %w", perr["src:"+it.Source])
			case dst[tmp(it)] == "":
				// The temporary file is gone or unreadable: not the source's fault, so retry.
				errs[it] = fmt.Errorf("%w: %s: %v", errMismatch, tmp(it), perr["dst:"+tmp(it)])
			case src[it.Source] != dst[tmp(it)]:
				errs[it] = fmt.Errorf("%w: sha256 of %s is %s at the source, %s at the destination", errMismatch, it.Source, src[it.Source], dst[tmp(it)])
			default:
				sums[it] = src[it.Source]
			}
		}
	}
	return errs, sums
}

// finalize sets mode and modification time on it's temporary file (unless cp -p did) and renames
// it into place.
func (r *run) finalize(ctx context.Context, s *stream, it *Item, setAttrs bool) error {
	_, dc, err := s.clients(ctx)
	if err != nil {
		return err
	}
	tmp := tempName(it.Destination, r.t.ID)
	if setAttrs {
		if err := dc.Chmod(tmp, os.FileMode(it.mode)); err != nil {
			return fmt.Errorf("chmod %s: %w", tmp, err)
		}
		mt := time.Unix(it.mtime, 0)
		if err := dc.Chtimes(tmp, mt, mt); err != nil {
			return fmt.Errorf("set times of %s: %w", tmp, err)
		}
	}
	if err := dc.PosixRename(tmp, it.Destination); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, it.Destination, err)
	}
	return nil
}

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

// verifyAndFinalize verifies items' temporary files and renames the good ones into place. It
// returns the verification errors.
func (r *run) verifyAndFinalize(ctx context.Context, s *stream, items []*Item, addBytes bool) map[*Item]error {
	errs, sums := r.verify(ctx, s, items)
	forEach(items, 16, func(_ int, it *Item) {
		if err := errs[it]; err != nil {
			r.itemFailed(ctx, it, err)
			return
		}
		if err := r.finalize(ctx, s, it, !r.t.SameSystem); err != nil {
			s.fail(err)
			r.itemFailed(ctx, it, err)
			return
		}
		r.itemDone(it, sums[it], addBytes)
	})
	return errs
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
// stream, 16 and 32 both about 27 MiB/s).
const (
	blockSize      = 256 << 10
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

// doLarge moves multi-range files: every unfinished range is a task; each stream works one range
// at a time, so a fault loses at most one range per stream. A file whose last range lands is
// verified and renamed while other ranges keep flowing.
func (r *run) doLarge(ctx context.Context, large []*Item) error {
	if len(large) == 0 {
		return nil
	}
	type task struct {
		it  *Item
		idx int
	}
	type fileState struct {
		remaining atomic.Int64
		mu        sync.Mutex
		err       error
	}
	states := map[*Item]*fileState{}
	var tasks []task
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
				tasks = append(tasks, task{it, idx})
				st.remaining.Add(1)
			}
		}
		r.mu.Unlock()
		states[it] = st
	}
	defer r.startSourceSums(ctx, prepared(large, states))()
	ch := make(chan task, len(tasks))
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
	finish := func(t task, err error) {
		st := states[t.it]
		if err != nil {
			st.mu.Lock()
			if st.err == nil {
				st.err = err
			}
			st.mu.Unlock()
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
				verr := r.verifyAndFinalize(ctx, r.streams[0], []*Item{it}, false)
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
				err := r.doRange(ctx, s, t.it, t.idx)
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
	f, err := createTemp(dc, tmp)
	if err != nil {
		return err
	}
	err = f.Truncate(it.Size)
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

// doRange copies range idx of it over stream s and records it.
func (r *run) doRange(ctx context.Context, s *stream, it *Item, idx int) error {
	if err := r.recheck(ctx); err != nil {
		return err
	}
	sf, df, err := s.files(ctx, it, tempName(it.Destination, r.t.ID))
	if err != nil {
		s.fail(err)
		return err
	}
	off := int64(idx) * r.t.ChunkSize
	n := r.rangeLen(it, idx)
	if err := r.copyRange(ctx, sf, df, off, n, it.Source); err != nil {
		s.closeFiles()
		s.fail(err)
		return err
	}
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
		r.verifyAndFinalize(ctx, s, ok, true)
		return r.save(ctx, batch)
	})
}

// cleanup removes the temporary files of items that did not finish.
func (r *run) cleanup(ctx context.Context) {
	r.mu.Lock()
	var staged []*Item
	for _, it := range r.items {
		if it.Kind == KindFile && it.staged && it.Status != ItemDone {
			staged = append(staged, it)
		}
	}
	r.mu.Unlock()
	if len(staged) == 0 || r.dst.Target.Addr == "" {
		return
	}
	if err := removeTemps(ctx, r.e.pool, r.dst.Target, r.t.ID, staged, r.e.cfg.OpenTimeout); err != nil {
		r.e.log.Warn("transfer: removing temporary files", "id", r.t.ID, "err", err)
		return
	}
	r.mu.Lock()
	for _, it := range staged {
		it.staged = false
	}
	r.mu.Unlock()
	if err := r.save(ctx, staged); err != nil {
		r.e.log.Warn("transfer: saving items after cleanup", "id", r.t.ID, "err", err)
	}
}

// resolve finds one endpoint's system, judging the owner's access to its path when the
// resolver can (write for the destination).
func (e *Engine) resolve(ctx context.Context, owner string, ep Endpoint, write bool) (System, error) {
	if er, ok := e.resolver.(EndpointResolver); ok {
		return er.ResolveEndpoint(ctx, owner, ep, write)
	}
	return e.resolver.Resolve(ctx, owner, ep.System)
}

// recheck asks both endpoints whether the owner may still use them (before every round and
// every range); a refusal (ErrSystem) ends the run with it as the cause, so the transfer fails
// at once instead of being retried.
func (r *run) recheck(ctx context.Context) error {
	for _, sys := range []System{r.src, r.dst} {
		if sys.Recheck == nil {
			continue
		}
		if err := sys.Recheck(ctx); err != nil {
			if errors.Is(err, ErrSystem) {
				err = permanent(fmt.Errorf("access revoked: %w", err))
				r.cancel(err)
			}
			return err
		}
	}
	return nil
}
