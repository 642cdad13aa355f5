package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Snapshot is the result of one squeue for one credential.
type Snapshot struct {
	// At is when the squeue started: every job submitted before At is in Jobs (or had already
	// left the controller).
	At   time.Time
	Jobs map[string]*Job
	// Err is set when the squeue failed (ErrUnavailable while the controller is down).
	Err error
}

// PollerConfig tunes a Poller.
type PollerConfig struct {
	// Interval is the least time between two squeue runs for one credential (default 1s).
	Interval time.Duration
	// MaxWatchersPerKey bounds the watchers of one credential (default 1000).
	MaxWatchersPerKey int
	// MaxKeys bounds the credentials polled at once (default 10000).
	MaxKeys int
	// MaxKeysPerOwner bounds the credentials polled at once for one owner (Slurm.Owner; default
	// 64), so one user with many systems never takes the others' share of MaxKeys.
	MaxKeysPerOwner int
	// MaxWatchersPerOwner bounds one owner's watchers over all its credentials (default 1000),
	// as MaxWatchersPerKey bounds one credential's.
	MaxWatchersPerOwner int
	// Idle: a credential nobody asked about for this long stops being polled (default 5s).
	Idle time.Duration
}

// ErrBusy is returned when a Poller's bounds are reached.
var ErrBusy = errors.New("too many job watchers")

// Poller runs at most one squeue per credential per Interval, however many callers read jobs
// or watch them, and fans each result out. A credential is polled only while someone reads or
// watches its jobs. Start and Stop own its goroutines.
type Poller[K comparable] struct {
	cfg PollerConfig
	// judged, when set (by tests, before any Wait), is called each time a Wait has judged the
	// job from a snapshot, so a test can know that a waiter saw the job before it breaks things.
	judged func(id string)

	mu      sync.Mutex
	feeds   map[K]*feed
	stopped bool
	// usesMu guards uses, each owner's feeds and watchers; it is taken last (under mu or a
	// feed's mu) and nothing is taken under it.
	usesMu sync.Mutex
	uses   map[string]*ownerUse
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ownerUse is what one owner holds of a Poller: it exists while either count is above zero.
type ownerUse struct{ feeds, watchers int }

// feed is one credential's polling state.
type feed struct {
	owner string // Slurm.Owner of the caller that made it (a credential has one owner)
	slurm *Slurm // the latest caller's (a credential's runner is interchangeable)

	mu       sync.Mutex
	last     *Snapshot
	lastRun  time.Time // start of the latest squeue
	running  bool
	waiters  []chan *Snapshot // one-shot: want a snapshot newer than when they asked
	watchers map[*Watch]struct{}
	lastUse  time.Time
	wake     chan struct{}
	polls    int64
	done     map[string]*Job    // finished jobs' full records (exit codes), bounded by maxDone
	lookups  singleflight.Group // one scontrol per job id at a time, however many ask
	// ended is set, with the feed removed from the Poller, once Slurm.Allowed refused: the
	// feed polls no more and whoever finds it asks feedFor for a new one.
	ended error
}

// maxDone bounds the finished jobs' records a feed keeps.
const maxDone = 4096

// NewPoller builds a Poller; call Start before use.
func NewPoller[K comparable](cfg PollerConfig) *Poller[K] {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.MaxWatchersPerKey <= 0 {
		cfg.MaxWatchersPerKey = 1000
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 10000
	}
	if cfg.MaxKeysPerOwner <= 0 {
		cfg.MaxKeysPerOwner = 64
	}
	if cfg.MaxWatchersPerOwner <= 0 {
		cfg.MaxWatchersPerOwner = 1000
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 5 * time.Second
	}
	return &Poller[K]{cfg: cfg, feeds: map[K]*feed{}, uses: map[string]*ownerUse{}}
}

// use adds df feeds and dw watchers to owner's counts, unless that would take either past its
// bound; it reports whether it did. Negative deltas always apply.
func (p *Poller[K]) use(owner string, df, dw int) bool {
	p.usesMu.Lock()
	defer p.usesMu.Unlock()
	u := p.uses[owner]
	if u == nil {
		u = &ownerUse{}
	}
	if (df > 0 && u.feeds+df > p.cfg.MaxKeysPerOwner) || (dw > 0 && u.watchers+dw > p.cfg.MaxWatchersPerOwner) {
		return false
	}
	u.feeds, u.watchers = u.feeds+df, u.watchers+dw
	if u.feeds <= 0 && u.watchers <= 0 {
		delete(p.uses, owner)
	} else {
		p.uses[owner] = u
	}
	return true
}

// Start lets the poller run feeds.
func (p *Poller[K]) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx, p.cancel = context.WithCancel(context.Background())
}

// Stop ends every feed and waits for their goroutines.
func (p *Poller[K]) Stop() {
	p.mu.Lock()
	p.stopped = true
	if p.cancel != nil {
		p.cancel()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Interval is the polling interval.
func (p *Poller[K]) Interval() time.Duration { return p.cfg.Interval }

// Polls returns how many squeue runs key's feed has made (for tests and metrics).
func (p *Poller[K]) Polls(key K) int64 {
	p.mu.Lock()
	f := p.feeds[key]
	p.mu.Unlock()
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls
}

// feedFor returns key's feed, starting its goroutine if needed.
func (p *Poller[K]) feedFor(key K, s *Slurm) (*feed, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.ctx == nil {
		return nil, errors.New("job poller is not running")
	}
	f := p.feeds[key]
	if f == nil {
		if len(p.feeds) >= p.cfg.MaxKeys {
			return nil, fmt.Errorf("%w: %d credentials are being polled", ErrBusy, len(p.feeds))
		}
		if !p.use(s.Owner, 1, 0) {
			return nil, fmt.Errorf("%w: %d of your credentials are being polled (jobs.max_feeds_per_owner)", ErrBusy, p.cfg.MaxKeysPerOwner)
		}
		f = &feed{owner: s.Owner, slurm: s, watchers: map[*Watch]struct{}{}, done: map[string]*Job{}, wake: make(chan struct{}, 1), lastUse: time.Now()}
		p.feeds[key] = f
		p.wg.Add(1)
		go p.run(key, f)
	}
	f.mu.Lock()
	f.slurm, f.lastUse = s, time.Now()
	f.mu.Unlock()
	return f, nil
}

// liveFeed returns key's feed locked, one that has not ended: a feed found ended (its access
// was refused after feedFor returned it) has left the Poller already, so feedFor's next answer
// is a new one, which decides for itself.
func (p *Poller[K]) liveFeed(key K, s *Slurm) (*feed, error) {
	for {
		f, err := p.feedFor(key, s)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		if f.ended == nil {
			return f, nil
		}
		f.mu.Unlock()
	}
}

// run polls for one feed while it is used, at most once per Interval.
func (p *Poller[K]) run(key K, f *feed) {
	defer p.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-p.ctx.Done():
			f.fail(p.ctx.Err())
			return
		case <-f.wake:
		case <-timer.C:
		}
		p.mu.Lock() // lock order: Poller, then feed
		f.mu.Lock()
		idle := len(f.watchers) == 0 && len(f.waiters) == 0
		if idle && time.Since(f.lastUse) > p.cfg.Idle {
			delete(p.feeds, key)
			p.use(f.owner, -1, 0)
			f.mu.Unlock()
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		wait := p.cfg.Interval - time.Since(f.lastRun)
		if idle || wait > 0 {
			f.mu.Unlock()
			if wait <= 0 || idle {
				wait = p.cfg.Interval
			}
			timer.Reset(wait)
			continue
		}
		f.running, f.lastRun = true, time.Now()
		s := f.slurm
		f.mu.Unlock()

		ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
		if s.Allowed != nil {
			if err := s.Allowed(ctx); err != nil {
				cancel()
				p.end(key, f, err)
				return
			}
		}
		f.mu.Lock()
		f.polls++
		f.mu.Unlock()
		snap := &Snapshot{At: time.Now(), Jobs: map[string]*Job{}}
		list, err := s.List(ctx)
		cancel()
		if err != nil {
			snap.Err = err
		}
		for i := range list {
			snap.Jobs[list[i].ID] = &list[i]
		}
		f.publish(snap)
		timer.Reset(p.cfg.Interval)
	}
}

// end removes key's feed f and ends it with refusal, in one step under both locks (see the
// package doc): every waiter and watcher gets it as the last snapshot, and a caller that finds
// the feed later sees f.ended and asks for a new feed.
func (p *Poller[K]) end(key K, f *feed, refusal error) {
	p.mu.Lock() // lock order: Poller, then feed
	defer p.mu.Unlock()
	if p.feeds[key] == f {
		delete(p.feeds, key)
		p.use(f.owner, -1, 0)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = fmt.Errorf("%w: %w", ErrRevoked, refusal)
	f.publishLocked(&Snapshot{At: time.Now(), Err: f.ended})
}

// publish hands snap to every waiter and watcher.
func (f *feed) publish(snap *Snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishLocked(snap)
}

// publishLocked is publish with f.mu held.
func (f *feed) publishLocked(snap *Snapshot) {
	f.running = false
	if snap.Err == nil || f.last == nil || f.last.Err != nil {
		f.last = snap
	} else {
		// Keep the last good jobs, note the failure.
		f.last = &Snapshot{At: f.last.At, Jobs: f.last.Jobs, Err: snap.Err}
	}
	for _, w := range f.waiters {
		w <- snap
	}
	f.waiters = nil
	for w := range f.watchers {
		select {
		case <-w.ch:
		default:
		}
		w.ch <- snap // capacity 1, just drained: latest wins
	}
}

func (f *feed) fail(err error) {
	f.publish(&Snapshot{At: time.Now(), Err: err})
}

// Snapshot returns key's jobs as of at most maxAge ago (a cached result when it is fresh enough;
// otherwise it waits for the feed's next squeue, which runs at most once per Interval).
func (p *Poller[K]) Snapshot(ctx context.Context, key K, s *Slurm, maxAge time.Duration) (*Snapshot, error) {
	f, err := p.liveFeed(key, s)
	if err != nil {
		return nil, err
	}
	if f.last != nil && f.last.Err == nil && time.Since(f.last.At) <= maxAge {
		snap := f.last
		f.mu.Unlock()
		return snap, nil
	}
	if len(f.waiters) >= p.cfg.MaxWatchersPerKey {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: %d requests wait for this credential's next poll", ErrBusy, len(f.waiters))
	}
	ch := make(chan *Snapshot, 1)
	f.waiters = append(f.waiters, ch)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	select {
	case snap := <-ch:
		if snap.Err != nil {
			return nil, snap.Err
		}
		return snap, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Watch receives every snapshot of one credential until Close.
type Watch struct {
	ch      chan *Snapshot
	f       *feed
	once    sync.Once
	release func() // gives the owner's watcher back
}

// C delivers snapshots; only the latest is kept for a slow reader.
func (w *Watch) C() <-chan *Snapshot { return w.ch }

// Close stops the watch.
func (w *Watch) Close() {
	w.once.Do(func() {
		w.f.mu.Lock()
		delete(w.f.watchers, w)
		w.f.lastUse = time.Now()
		w.f.mu.Unlock()
		w.release()
	})
}

// Watch subscribes to key's snapshots: the feed polls every Interval while any watch is open.
func (p *Poller[K]) Watch(key K, s *Slurm) (*Watch, error) {
	f, err := p.liveFeed(key, s)
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if len(f.watchers) >= p.cfg.MaxWatchersPerKey {
		return nil, fmt.Errorf("%w: %d watchers on this credential", ErrBusy, len(f.watchers))
	}
	if !p.use(f.owner, 0, 1) {
		return nil, fmt.Errorf("%w: %d watchers of yours are open (jobs.max_watchers_per_owner)", ErrBusy, p.cfg.MaxWatchersPerOwner)
	}
	owner := f.owner
	w := &Watch{ch: make(chan *Snapshot, 1), f: f, release: func() { p.use(owner, 0, -1) }}
	f.watchers[w] = struct{}{}
	if f.last != nil {
		w.ch <- f.last
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return w, nil
}

// Job returns one of the user's jobs: from a snapshot at most one Interval old while the
// controller lists it (a finished job's exit code and paths from one `scontrol show job`, kept),
// otherwise straight from `scontrol show job`, so a job submitted after the snapshot is found
// and another user's job or an unknown id is told apart.
func (p *Poller[K]) Job(ctx context.Context, key K, s *Slurm, user, id string) (*Job, error) {
	if !ValidJobID(id) {
		return nil, fieldErr("job_id", "%q is not a job id (123, or 123_4 for an array task)", id)
	}
	snap, err := p.Snapshot(ctx, key, s, p.cfg.Interval)
	if err != nil {
		return nil, err
	}
	return p.fromSnapshot(ctx, key, s, user, id, snap)
}

func (p *Poller[K]) fromSnapshot(ctx context.Context, key K, s *Slurm, user, id string, snap *Snapshot) (*Job, error) {
	j, ok := snap.Jobs[id]
	if ok && !j.Finished {
		c := *j
		return &c, nil
	}
	f, err := p.feedFor(key, s)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	d := f.done[id]
	f.mu.Unlock()
	if d != nil {
		c := *d
		return &c, nil
	}
	v, err, _ := f.lookups.Do(id, func() (any, error) {
		// Not the caller's ctx: the lookup is shared, and one caller leaving must not fail it
		// for the others.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		full, err := s.Lookup(lctx, user, id)
		if err != nil {
			return nil, err
		}
		// A finished job's record is kept once complete (its efficiency arrives in accounting
		// a moment after the controller reports the end).
		if full.Finished && (!s.Sched.Accounting || full.Efficiency != nil) {
			f.mu.Lock()
			if len(f.done) >= maxDone {
				clear(f.done)
			}
			f.done[id] = full
			f.mu.Unlock()
		}
		return full, nil
	})
	if err != nil {
		return nil, err
	}
	c := *(v.(*Job))
	return &c, nil
}

// Wait blocks until the user's job reaches want ("running" or "finished") and returns it. When
// ctx ends first it returns the job as last seen and ctx's error. It starts from the feed's
// latest snapshot (however old: later ones correct it) rather than waiting for a fresh one, so
// a wait costs no command and answers within one interval of the change. A controller that is
// down when the wait starts is ErrUnavailable; one that goes down during the wait is waited
// out, and the wait resumes when it answers again.
func (p *Poller[K]) Wait(ctx context.Context, key K, s *Slurm, user, id, want string) (*Job, error) {
	if !ValidJobID(id) {
		return nil, fieldErr("job_id", "%q is not a job id (123, or 123_4 for an array task)", id)
	}
	w, err := p.Watch(key, s)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	var j *Job
	for {
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case snap := <-w.C():
			if snap.Err != nil {
				if j == nil || errors.Is(snap.Err, ErrRevoked) {
					return j, snap.Err
				}
				continue
			}
			next, err := p.fromSnapshot(ctx, key, s, user, id, snap)
			if err != nil {
				if j != nil && errors.Is(err, ErrUnavailable) {
					continue
				}
				return j, err
			}
			j = next
			if p.judged != nil {
				p.judged(id)
			}
			if j.Reached(want) {
				return j, nil
			}
		}
	}
}
