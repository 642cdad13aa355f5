package transfer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sshapi/sshapi/internal/confine"
)

// Why a run's context ended.
var (
	errUserCanceled = errors.New("canceled by the user")
	errDeadline     = errors.New("deadline exceeded")
	errLeaseLost    = errors.New("another runner took over the transfer")
	// errLeaseLapsed: the run could not renew its lease for two thirds of its length (the
	// database is away or slow) and stops before any other instance may take the transfer
	// over (at the lease's end), so two runs never write the same files at once.
	errLeaseLapsed = fmt.Errorf("%w: lease not renewed in time", errLeaseLost)
	// errRunningHere tells the worker that a run of this engine has the transfer: the job waits.
	errRunningHere = errors.New("a run of this instance has the transfer")
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
	obj              *objectRun    // set when an end is object storage (object.go)
	walk             *planWalk     // the directory walk still to do; planRound does it (plan.go)
	destSums         sync.Map      // temporary path → sha256 the destination streamed while copying
	tarSums          sync.Map      // source path → sha256 of the bytes a tar batch read from it (tarsmall.go)
	tarOff           atomic.Bool   // small files go over SFTP: tar is unusable on an end (tarsmall.go)
	renameOff        atomic.Bool   // files are renamed over SFTP: perl is unusable at the destination (batchrename.go)
	verifyRenameOff  atomic.Bool   // tar batches are verified by sha256sum: perl's Digest::SHA is unusable (batchrename.go)

	mu      sync.Mutex // guards items' fields, ranges, lastErr and the rate sample
	items   []*Item
	ranges  map[int64]map[int]bool
	lastErr error
	checked map[int64]bool // files whose sync level was checked in this run

	streams []*stream
	warming sync.WaitGroup // warmStreams' opens

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
	e.mu.Lock()
	_, running := e.local[id]
	if !running {
		e.local[id] = struct{}{}
	}
	e.mu.Unlock()
	if running {
		// Not completed: this job may be the reaper's re-queue of a run here whose lease lapsed
		// and which is still winding down; completing it would leave the transfer queued with
		// no job once that run ends. The worker snoozes it; it runs (or finds the transfer
		// finished) once the local run is over.
		e.log.Info("transfer already running on this instance; job snoozed until that run ends", "id", id)
		return errRunningHere
	}
	defer func() {
		e.mu.Lock()
		delete(e.local, id)
		e.mu.Unlock()
	}()
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
		r.heartbeat(hbCtx, now)
	}()
	err = r.execute(ctx)
	stopHB()
	<-hbDone
	r.closeStreams()
	defer r.closeObject() // after conclude, whose cleanup aborts uploads through the channels
	return r.conclude(parent, err)
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
//
// The lease ends LeaseTTL after the last renewal was sent (renewed is when the acquiring or
// renewing statement was sent, so the lease in the database never outlasts renewed+LeaseTTL).
// Another instance may take the transfer over once it has ended. A run that cannot renew
// (the database is away, or a renewal hangs) therefore stops itself at renewed + 2/3 of
// LeaseTTL, leaving a third of the lease for the writes it has in flight to end, instead of
// writing on beside the run that takes over. The margin assumes the instances' clocks agree
// to well within LeaseTTL/3.
func (r *run) heartbeat(ctx context.Context, renewed time.Time) {
	ttl := r.e.cfg.LeaseTTL
	interval := min(ttl/3, time.Second)
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
		sent := time.Now()
		fence := renewed.Add(ttl * 2 / 3)
		if !sent.Before(fence) {
			r.e.log.Warn("transfer lease not renewed in time; stopping this run", "id", r.t.ID, "renewed", renewed)
			r.cancel(errLeaseLapsed)
			return
		}
		hctx, cancel := context.WithDeadline(ctx, fence)
		st, held, err := r.e.db.heartbeat(hctx, r.t.ID, r.e.instance, sent.Add(ttl), r.progress())
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.e.log.Warn("transfer heartbeat", "id", r.t.ID, "err", err)
			}
			if !time.Now().Before(fence) {
				r.e.log.Warn("transfer lease not renewed in time; stopping this run", "id", r.t.ID, "renewed", renewed)
				r.cancel(errLeaseLapsed)
				return
			}
			continue
		case held:
			renewed = sent
		}
		switch {
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
		var pending []*Item
		if r.walk == nil {
			pending = r.pending()
			if len(pending) == 0 {
				r.finishDirs(ctx)
				return nil
			}
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
		var err error
		if r.walk != nil {
			err = r.planRound(ctx)
		} else {
			err = r.round(ctx, pending)
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
}

// round tries every pending item once: directories, symlinks, the sync check, then the files.
// Every item is first checked against both systems' root directories. With a shared end the
// round goes chunk by chunk (see Config.SharedChunkItems), each under a hold of its own.
func (r *run) round(ctx context.Context, pending []*Item) error {
	if err := r.recheck(ctx); err != nil {
		return err
	}
	for _, s := range r.streams {
		s.revive()
	}
	if r.src.Hold == nil && r.dst.Hold == nil {
		return r.roundChunk(ctx, pending)
	}
	for _, chunk := range chunks(pending, r.e.cfg.SharedChunkItems, r.e.cfg.SharedChunkBytes) {
		if err := r.roundChunk(ctx, chunk); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	return nil
}

// chunks cuts items, in order (directories before what they hold), into runs of at most n
// items and b bytes; an item larger than b is a chunk of its own.
func chunks(items []*Item, n int, b int64) [][]*Item {
	var out [][]*Item
	start, size := 0, int64(0)
	for i, it := range items {
		if i > start && (i-start >= n || size+it.Size > b) {
			out = append(out, items[start:i])
			start, size = i, 0
		}
		size += it.Size
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

// roundChunk tries items once, holding the shared ends' guards (and checking the items' paths
// afresh under them).
func (r *run) roundChunk(ctx context.Context, pending []*Item) error {
	held, release, err := r.hold(ctx)
	if err != nil {
		// Others hold the shared files (a move waiting, say): these items stay pending, and
		// the next round comes after the usual backoff.
		r.setLastErr(fmt.Errorf("waiting for the shared files: %w", err))
		return nil
	}
	defer release()
	err = r.chunkHeld(held, pending)
	if lost := lostHold(ctx, held); lost != nil {
		// Stopped mid-chunk: its items that did not finish are still pending (a canceled
		// item is not failed), and the next round, after the usual backoff, holds afresh.
		r.setLastErr(lost)
		return nil
	}
	return err
}

// chunkHeld is roundChunk's work, under its holds.
func (r *run) chunkHeld(ctx context.Context, pending []*Item) error {
	if r.obj != nil {
		return r.objectRound(ctx, pending)
	}
	small, large, err := r.prepareItems(ctx, pending)
	if err != nil {
		return err
	}
	if r.t.SameSystem {
		return r.doServerSide(ctx, append(small, large...))
	}
	if err := r.doSmall(ctx, small); err != nil {
		return err
	}
	return r.doLarge(ctx, stillPending(large))
}

// prepareItems checks items against both roots, creates the directories, recreates the symlinks and
// applies the sync level, and returns the files still to copy: the single-range ones and the
// others.
func (r *run) prepareItems(ctx context.Context, pending []*Item) (small, large []*Item, err error) {
	// Each chunk asks again: a round (or a streamed plan) prepares chunk after chunk, and a
	// grant revoked meanwhile must stop the directories and symlinks of the next one.
	if err := r.recheck(ctx); err != nil {
		return nil, nil, err
	}
	pending, err = r.checkItems(ctx, r.streams[0], pending)
	if err != nil {
		return nil, nil, err
	}
	var dirs, links []*Item
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
		return nil, nil, err
	}
	if err := r.doLinks(ctx, links); err != nil {
		return nil, nil, err
	}
	if r.t.Sync != SyncAlways {
		if err := r.syncCheck(ctx, append(append([]*Item(nil), small...), large...)); err != nil {
			return nil, nil, err
		}
	}
	return stillPending(small), stillPending(large), nil
}

// planRound is the first round of a directory transfer that streams its plan (streamPlan): the
// walk (walkPlan) stores the items a chunk at a time, and each stored chunk goes through prepareItems
// and its small files into the tar batches at once, while the walk goes on; large files follow
// once the walk is complete. Items stored by an earlier, interrupted walk that are still pending
// go first. Chunks are prepared one after another, in the walk's order, so a directory is made
// before the files of any later chunk are written into it; every item is checked against both
// roots just before it moves, as in round. A walk that fails for a reason retrying may cure
// ends the round (the next one walks again, keeping what was stored); one beyond the plan's
// limits fails the transfer.
func (r *run) planRound(ctx context.Context) error {
	if err := r.recheck(ctx); err != nil {
		return err
	}
	for _, s := range r.streams {
		s.revive()
	}
	sc, _, err := r.streams[0].clients(ctx)
	if err != nil {
		r.setLastErr(err)
		return nil
	}
	stored := r.pending()
	wctx, stopWalk := context.WithCancel(ctx)
	defer stopWalk()
	chunks := make(chan []*Item, r.tarWorkers())
	var walkErr error
	var walker sync.WaitGroup
	walker.Go(func() {
		defer close(chunks)
		send := func(c []*Item) error {
			select {
			case chunks <- c:
				return nil
			case <-wctx.Done():
				return context.Cause(wctx)
			}
		}
		for _, c := range batches(stored, r.planChunkMax()) {
			if err := send(c); err != nil {
				return
			}
		}
		walkErr = r.walkPlan(wctx, sc, send)
	})
	pool := r.startSmall(ctx)
	var large []*Item
	var prepErr error
	for chunk := range chunks {
		if prepErr != nil || ctx.Err() != nil {
			continue // drain: the walk ends at its next send
		}
		small, lg, err := r.prepareItems(ctx, chunk)
		if err != nil {
			prepErr = err
			stopWalk()
			continue
		}
		large = append(large, lg...)
		for _, b := range pool.cut(small) {
			pool.put(b)
		}
	}
	walker.Wait()
	smallErr := pool.wait()
	switch {
	case prepErr != nil:
		return prepErr
	case smallErr != nil:
		return smallErr
	case ctx.Err() != nil:
		return nil
	case walkErr != nil && (isPermanent(walkErr) || isDBErr(walkErr)):
		return walkErr
	case walkErr != nil:
		r.streams[0].fail(walkErr)
		r.setLastErr(fmt.Errorf("plan: %w", walkErr))
		return nil
	}
	r.walk = nil
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

// stage records items' attempts and that their temporary files may exist (see ItemsStage),
// planChunk items per transaction (see walkPlan on SQLite's one connection); all of them before
// it returns.
func (r *run) stage(ctx context.Context, items []*Item) error {
	r.mu.Lock()
	cp := make([]*Item, len(items))
	for i, it := range items {
		cp[i] = &Item{Seq: it.Seq, Attempts: it.Attempts}
	}
	r.mu.Unlock()
	for _, part := range batches(cp, r.planChunk()) {
		if err := r.e.db.stageItems(context.WithoutCancel(ctx), r.t.ID, part); err != nil {
			return dbe(err)
		}
	}
	return nil
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

// cleanup removes the temporary files of items that did not finish (aborts the uploads of an
// object run).
func (r *run) cleanup(ctx context.Context) {
	if r.obj != nil {
		r.cleanupObject(ctx)
		return
	}
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

// hold takes both endpoints' guards (once when they are the same) for a setup or a round, and
// makes the roots forget what they resolved before: between two holds, others acting through
// grants may have restructured the trees. The work relying on the holds runs under held, a
// child of ctx that ends when either hold is lost (see lostHold).
func (r *run) hold(ctx context.Context) (held context.Context, release func(), err error) {
	var releases []func()
	release = func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	held = ctx
	for i, sys := range []System{r.src, r.dst} {
		if sys.Hold == nil || (i == 1 && r.src.Hold != nil && r.src.HoldKey == sys.HoldKey) {
			continue
		}
		h, rel, err := sys.Hold(held) // the second hold's context is the first's child
		if err != nil {
			release()
			return nil, nil, err
		}
		held = h
		releases = append(releases, rel)
	}
	for _, rt := range []*confine.Root{r.srcRoot, r.dstRoot} {
		if rt != nil && len(releases) > 0 {
			rt.Forget()
		}
	}
	return held, release, nil
}

// lostHold is, once work under held (from hold(ctx)) has returned and before its release, the
// reason held ended although ctx did not: a hold was lost. The work stopped, and what it left
// pending is tried again under a new hold, which judges the paths afresh.
func lostHold(ctx, held context.Context) error {
	if held.Err() == nil || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("the guard on the shared files was lost; the work under it stopped: %w", context.Cause(held))
}

// recheck asks both endpoints whether the owner may still use them (before every round, every
// chunk prepareItems prepares, every batch of small files and every range); a refusal
// (ErrSystem) ends the run with it as the cause, so the transfer fails at once instead of
// being retried.
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
