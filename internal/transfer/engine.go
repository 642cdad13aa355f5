package transfer

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/storage"
)

// Pool is what transfers need from the SSH connection pool: dedicated SFTP channels for data and
// exec sessions for sha256sum and cp. *sshpool.Pool implements it.
type Pool interface {
	NewSession(ctx context.Context, t sshpool.Target) (*sshpool.Session, error)
	DedicatedSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error)
}

// System is how to reach one of a user's systems.
type System struct {
	// Storage, when set, is the system's storage (an S3 bucket): the endpoint is reached
	// through it and Target is unused. Nil for an SSH system. A transfer with either end's
	// Storage set runs through the storage backends (see object.go).
	Storage storage.Backend
	Target  sshpool.Target
	// RootDir, if set, confines the transfer's paths on this system.
	RootDir string
	// Within, if set, is a further root inside RootDir (the grant the caller acts under).
	Within string
	// Recheck, if set, is asked before every round, every chunk of items a round prepares,
	// every batch of small files (single-range files, which move in batches rather than by
	// range) and every range whether the caller may still use this endpoint (a revoked grant
	// stops a running transfer there); an error wrapping ErrSystem fails the transfer.
	Recheck func(ctx context.Context) error
	// Hold, if set, orders the run's use of this endpoint's paths against restructuring by the
	// other principals acting through grants on the same owner's files (access.Decision.Hold,
	// shared): a run holds it while it plans and during each chunk of a round, and does that
	// work under held, which ends if the hold is lost (the guard's lock across instances
	// ended): the work stops there, its items stay pending and the next round holds and checks
	// them afresh. HoldKey names what it holds, so a run whose two ends are one owner's holds it
	// once.
	Hold    func(ctx context.Context) (held context.Context, release func(), err error)
	HoldKey string
}

// EndpointResolver is a Resolver that also judges the caller's access to an endpoint's path
// (write for a destination); the engine prefers it when the Resolver implements it.
type EndpointResolver interface {
	ResolveEndpoint(ctx context.Context, owner string, ep Endpoint, write bool) (System, error)
}

// Resolver finds a user's system when a run starts (credentials may have changed since the
// transfer was submitted). Errors that retrying cannot fix wrap ErrSystem.
type Resolver interface {
	Resolve(ctx context.Context, owner, system string) (System, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, owner, system string) (System, error)

// Resolve calls f.
func (f ResolverFunc) Resolve(ctx context.Context, owner, system string) (System, error) {
	return f(ctx, owner, system)
}

// ErrSystem is wrapped by Resolver errors for a system that is gone or unusable (no credential).
var ErrSystem = errors.New("system unusable")

// Config tunes the engine. Zero fields take the defaults shown.
type Config struct {
	// Workers is how many transfers run at once on this instance (4).
	Workers int `yaml:"workers" env:"WORKERS"`
	// MinStreams and MaxStreams bound the automatic stream count (1, 16).
	MinStreams int `yaml:"min_streams" env:"MIN_STREAMS"`
	MaxStreams int `yaml:"max_streams" env:"MAX_STREAMS"`
	// LinkRate is the bandwidth in bytes/s assumed when choosing streams from the RTT
	// (1.25e9, 10 Gbit/s): streams = LinkRate × RTT / 2 MiB.
	LinkRate float64 `yaml:"link_rate" env:"LINK_RATE"`
	// SmallFileConcurrency is how many single-range files one batch copies at once (8).
	SmallFileConcurrency int `yaml:"small_file_concurrency" env:"SMALL_FILE_CONCURRENCY"`
	// BatchFiles is how many small files are verified with one sha256sum (64) and saved in one
	// transaction; a tar batch (tarsmall.go) moves 16 times as many, at most 64 MiB.
	BatchFiles int `yaml:"batch_files" env:"BATCH_FILES"`
	// RetryBase and RetryMax bound the exponential backoff between rounds (1s, 1m).
	RetryBase time.Duration `yaml:"retry_base" env:"RETRY_BASE"`
	RetryMax  time.Duration `yaml:"retry_max" env:"RETRY_MAX"`
	// MaxItemAttempts is how often a file is tried after errors other than a lost connection
	// (verification mismatches, remote failures) before it fails (5). Lost connections are
	// retried until the deadline.
	MaxItemAttempts int `yaml:"max_item_attempts" env:"MAX_ITEM_ATTEMPTS"`
	// LeaseTTL is how long a run's claim on a transfer lasts without a heartbeat (30s);
	// heartbeats come every LeaseTTL/3, and that is also how often progress is saved.
	LeaseTTL time.Duration `yaml:"lease_ttl" env:"LEASE_TTL"`
	// ReapInterval is how often transfers whose runner died are re-queued (15s).
	ReapInterval time.Duration `yaml:"reap_interval" env:"REAP_INTERVAL"`
	// PollInterval is how often River looks for new jobs (200ms).
	PollInterval time.Duration `yaml:"poll_interval" env:"POLL_INTERVAL"`
	// CommandTimeout bounds one sha256sum or cp batch (1h).
	CommandTimeout time.Duration `yaml:"command_timeout" env:"COMMAND_TIMEOUT"`
	// OpenTimeout bounds acquiring an SFTP channel for a stream (20s).
	OpenTimeout time.Duration `yaml:"open_timeout" env:"OPEN_TIMEOUT"`
	// MaxRunningPerOwner is how many of one owner's transfers run at once, on all instances
	// sharing the database together (half of Workers, at least 1); the owner's others stay
	// queued without holding a worker.
	MaxRunningPerOwner int `yaml:"max_running_per_owner" env:"MAX_RUNNING_PER_OWNER"`
	// MaxQueuedPerOwner caps one owner's unfinished (queued or running) transfers; Submit
	// refuses more with ErrQuota (100).
	MaxQueuedPerOwner int `yaml:"max_queued_per_owner" env:"MAX_QUEUED_PER_OWNER"`
	// MinRate is the slowest a run may copy, in bytes/s averaged over MinRateWindow of copying
	// (1024 bytes/s over 10m); a slower run goes back to the queue to retry on new channels,
	// SlowRetries times (2), and then the transfer fails. Slow runs are counted in the transfer's
	// row over its whole life, so a restart or another instance continues the count. A negative
	// MinRate disables the check, a negative SlowRetries fails at once.
	MinRate       float64       `yaml:"min_rate" env:"MIN_RATE"`
	MinRateWindow time.Duration `yaml:"min_rate_window" env:"MIN_RATE_WINDOW"`
	SlowRetries   int           `yaml:"slow_retries" env:"SLOW_RETRIES"`
	// DBConns caps this instance's connections to PostgreSQL for transfers and River (16); the
	// store has its own pool. SQLite uses one connection.
	DBConns int `yaml:"db_conns" env:"DB_CONNS"`
	// MaxPlanItems caps the items (files, directories, symlinks) one transfer's plan may hold
	// (1,000,000), and MaxPlanPathBytes the bytes of their source and destination paths
	// together (256 MiB): a run holds its plan in memory. A source tree beyond either fails
	// the transfer, naming the limit, as soon as the walk crosses it: before anything is
	// copied when the limit is below one plan chunk (a tar batch's worth of items, 1,024 by
	// default) or an end is shared; otherwise the chunks stored before it may have been copied.
	MaxPlanItems     int   `yaml:"max_plan_items" env:"MAX_PLAN_ITEMS"`
	MaxPlanPathBytes int64 `yaml:"max_plan_path_bytes" env:"MAX_PLAN_PATH_BYTES"`
	// HelperOutputBytes caps what is kept of the stdout and of the stderr of each helper
	// command a transfer runs on a server (a sha256 or cp batch) (1 MiB). A command printing
	// more fails, naming the limit, rather than being judged on cut output.
	HelperOutputBytes int64 `yaml:"helper_output_bytes" env:"HELPER_OUTPUT_BYTES"`
	// SharedChunkItems and SharedChunkBytes cut a round of a transfer with a shared end into
	// chunks of at most this many items and bytes (1,000, 256 MiB; a larger file is a chunk of
	// its own). The run holds the owner's guard (see access.Decision.Hold) for one chunk at a
	// time and checks the chunk's paths afresh each time, so others' moves wait for a chunk, not
	// for the whole transfer.
	SharedChunkItems int   `yaml:"shared_chunk_items" env:"SHARED_CHUNK_ITEMS"`
	SharedChunkBytes int64 `yaml:"shared_chunk_bytes" env:"SHARED_CHUNK_BYTES"`
	// ObjectBufferBytes bounds the memory of the parts that transfers with an object-storage
	// end hold while they send them (256 MiB): each of the Workers runs gets an equal share,
	// so parts in flight × part size stays within it (a part larger than the share, of a
	// file too big for 10,000 parts of the chunk size, goes alone). An SFTP destination's
	// backend copies a part once more while it writes it.
	ObjectBufferBytes int64 `yaml:"object_buffer_bytes" env:"OBJECT_BUFFER_BYTES"`
	// UploadMaxAge is how old an unfinished upload (S3 multipart upload, SFTP temporary file)
	// of a transfer without a live runner may get before the reaper aborts it (24h); uploads of
	// finished transfers are aborted at once. Only uploads the engine recorded are touched.
	UploadMaxAge time.Duration `yaml:"upload_max_age" env:"UPLOAD_MAX_AGE"`
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Workers, 4)
	def(&c.MinStreams, 1)
	def(&c.MaxStreams, MaxStreams)
	def(&c.SmallFileConcurrency, 8)
	def(&c.BatchFiles, 64)
	def(&c.MaxItemAttempts, 5)
	if c.LinkRate <= 0 {
		c.LinkRate = 1.25e9
	}
	defd(&c.RetryBase, time.Second)
	defd(&c.RetryMax, time.Minute)
	defd(&c.LeaseTTL, 30*time.Second)
	defd(&c.ReapInterval, 15*time.Second)
	defd(&c.PollInterval, 200*time.Millisecond)
	defd(&c.CommandTimeout, time.Hour)
	defd(&c.OpenTimeout, 20*time.Second)
	def(&c.MaxRunningPerOwner, max(c.Workers/2, 1))
	def(&c.MaxQueuedPerOwner, 100)
	def(&c.DBConns, 16)
	if c.MinRate == 0 {
		c.MinRate = 1024
	}
	defd(&c.MinRateWindow, 10*time.Minute)
	def(&c.MaxPlanItems, 1_000_000)
	if c.MaxPlanPathBytes <= 0 {
		c.MaxPlanPathBytes = 256 << 20
	}
	if c.HelperOutputBytes <= 0 {
		c.HelperOutputBytes = 1 << 20
	}
	def(&c.SharedChunkItems, 1000)
	if c.SharedChunkBytes <= 0 {
		c.SharedChunkBytes = 256 << 20
	}
	if c.SlowRetries == 0 {
		c.SlowRetries = 2
	}
	if c.ObjectBufferBytes <= 0 {
		c.ObjectBufferBytes = 256 << 20
	}
	defd(&c.UploadMaxAge, 24*time.Hour)
}

// BufferBytes is the most memory the engine's copy buffers may hold with this configuration:
// every worker running a transfer on its most streams (or small files at once), each with
// blocksInFlight blocks of blockSize and its source channel's 2 MiB receive window full.
func (c Config) BufferBytes() int64 {
	c.setDefaults()
	perRun := int64(max(c.MaxStreams, MaxStreams, c.SmallFileConcurrency))
	return int64(c.Workers) * perRun * (blocksInFlight*blockSize + channelWindow)
}

// Deps are the engine's collaborators.
type Deps struct {
	// DB holds the transfer tables and River's (OpenSQLite, OpenPostgres). The engine does
	// not close it.
	DB       Persistence
	Pool     Pool
	Resolver Resolver
	Log      *slog.Logger
	// Registerer receives the engine's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// queueName is the River queue transfer jobs run on.
const queueName = "transfers"

// jobArgs is the River job that runs (or resumes) one transfer.
type jobArgs struct {
	TransferID string `json:"transfer_id"`
}

// Kind names the job for River.
func (jobArgs) Kind() string { return "sshapi_transfer" }

// Engine runs transfers. Create it with New, Start it, and Stop it before closing the database.
type Engine struct {
	cfg      Config
	db       *db
	pool     Pool
	resolver Resolver
	log      *slog.Logger
	river    *river.Client[*sql.Tx]
	instance string // lease owner name of this process
	metrics  *metrics

	mu   sync.Mutex
	runs map[string]*run
	// local holds the transfers a job of this engine is running or about to run. The lease is
	// re-entrant for its holder (instance), so without this a second job for a transfer that
	// this engine is already running (River rescues a job that has been running longer than
	// RescueStuckJobsAfter, live or not; the reaper re-queues a run whose lease lapsed while it
	// winds down) would take the lease again and run beside the first, both writing the same
	// temporary files. Such a job is snoozed, not completed, until the local run is over.
	local map[string]struct{}

	closing     chan struct{} // closed when the engine begins to shut down
	closingOnce sync.Once

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New builds an engine on d.DB (migrated by OpenSQLite).
func New(cfg Config, d Deps) (*Engine, error) {
	cfg.setDefaults()
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg: cfg, db: &db{p: d.DB}, pool: d.Pool, resolver: d.Resolver, log: d.Log,
		instance: "i-" + randomHex(8), runs: map[string]*run{}, local: map[string]struct{}{}, metrics: newMetrics(d.Registerer),
		closing: make(chan struct{}),
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &worker{e: e}); err != nil {
		return nil, fmt.Errorf("transfer worker: %w", err)
	}
	client, err := river.NewClient(d.DB.River(), &river.Config{
		ID:                e.instance,
		Queues:            map[string]river.QueueConfig{queueName: {MaxWorkers: cfg.Workers}},
		Workers:           workers,
		FetchPollInterval: cfg.PollInterval,
		FetchCooldown:     min(cfg.PollInterval, 100*time.Millisecond),
		JobTimeout:        -1,
		// A job left "running" by an instance that died after fetching it (before the run took
		// the transfer's lease), or whose outcome River's completer could not write during a
		// database outage, is rescued after a few lease lengths rather than River's hour. A
		// job rescued while its run is alive is harmless: the second run finds the lease held
		// by another instance, or the transfer in this instance's claims, and ends (see
		// runTransfer).
		RescueStuckJobsAfter: 3 * cfg.LeaseTTL,
		Logger:               d.Log.With("component", "river"),
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	e.river = client
	return e, nil
}

// Start starts working jobs and the reaper that re-queues transfers whose runner died.
func (e *Engine) Start(ctx context.Context) error {
	if err := e.river.Start(ctx); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.wg.Add(1)
	go e.reaper(rctx)
	return nil
}

// Closing is closed when the engine begins to shut down, so that long-lived watchers (event
// streams) end and let the HTTP server drain.
func (e *Engine) Closing() <-chan struct{} { return e.closing }

// BeginShutdown closes Closing; Stop calls it too. Transfers keep running until Stop.
func (e *Engine) BeginShutdown() { e.closingOnce.Do(func() { close(e.closing) }) }

// Stop stops taking jobs and interrupts running transfers, which save their progress and go back
// to the queue to resume on the next Start (here or on another instance). It waits for them
// within ctx.
func (e *Engine) Stop(ctx context.Context) error {
	e.BeginShutdown()
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	if err := e.river.StopAndCancel(ctx); err != nil {
		return fmt.Errorf("stop river: %w", err)
	}
	return nil
}

// reaper periodically re-queues running transfers whose lease expired.
func (e *Engine) reaper(ctx context.Context) {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.ReapInterval)
	defer t.Stop()
	for {
		if err := e.reap(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("transfer reaper", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *Engine) reap(ctx context.Context) error {
	tx, err := e.db.begin(ctx)
	if err != nil {
		return fmt.Errorf("reap: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	ids, err := e.db.reap(ctx, tx, time.Now())
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := e.river.InsertTx(ctx, tx, jobArgs{TransferID: id}, e.insertOpts()); err != nil {
			return fmt.Errorf("reap: requeue %s: %w", id, err)
		}
		e.log.Info("transfer re-queued after its runner stopped heartbeating", "id", id)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("reap: %w", err)
	}
	// Canceled while its runner was dying: nobody removed the temporary files yet.
	canceled, err := e.db.reapCanceled(ctx, time.Now())
	if err != nil {
		return err
	}
	for _, id := range canceled {
		t, err := e.db.get(ctx, "", id)
		if err == nil {
			err = e.cleanupIdle(ctx, t)
		}
		if err != nil {
			e.log.Warn("canceled transfer whose runner stopped: removing temporary files failed", "id", id, "err", err)
		}
	}
	return e.reapUploads(ctx)
}

func (e *Engine) insertOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: queueName, MaxAttempts: 50}
}

// Submit validates req, records a queued transfer for owner and enqueues its job. A request
// with an idempotency key the owner used before returns that transfer (created false), or
// ErrConflict if the request differs. Validation errors are *FieldError. The caller checks that
// both systems are the owner's.
func (e *Engine) Submit(ctx context.Context, owner string, req Request) (*Transfer, bool, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	deadline, err := req.normalize(now)
	if err != nil {
		return nil, false, err
	}
	if req.IdempotencyKey != "" {
		if t, ok, err := e.sameKey(ctx, owner, req); ok || err != nil {
			return t, false, err
		}
	}
	t := &Transfer{
		ID: "tr-" + randomHex(10), Owner: owner, Status: StatusQueued,
		Source: req.Source, Destination: req.Destination, Recursive: req.Recursive, Sync: req.Sync,
		Verify: req.Verify, Streams: req.Streams, ChunkSize: req.ChunkSize,
		SameSystem: req.Source.System == req.Destination.System, IdempotencyKey: req.IdempotencyKey,
		CreatedAt: now, Deadline: deadline,
	}
	tx, err := e.db.begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if err := e.checkQueueQuota(ctx, tx, owner); err != nil {
		return nil, false, err
	}
	if err := e.db.insert(ctx, tx, t, req); err != nil {
		if errors.Is(err, ErrDuplicateKey) {
			_ = tx.Rollback()
			if t, ok, err := e.sameKey(ctx, owner, req); ok || err != nil {
				return t, false, err
			}
		}
		return nil, false, err
	}
	if _, err := e.river.InsertTx(ctx, tx, jobArgs{TransferID: t.ID}, e.insertOpts()); err != nil {
		return nil, false, fmt.Errorf("enqueue transfer: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	e.log.Info("transfer queued", "id", t.ID, "owner", owner, "source", t.Source.System, "destination", t.Destination.System)
	return t, true, nil
}

// sameKey returns the owner's transfer with req's idempotency key, if there is one.
func (e *Engine) sameKey(ctx context.Context, owner string, req Request) (*Transfer, bool, error) {
	t, prev, err := e.db.getByKey(ctx, owner, req.IdempotencyKey)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !reflect.DeepEqual(prev, req) {
		return nil, true, fmt.Errorf("%w: idempotency_key %q was used for a different request (transfer %s)", ErrConflict, req.IdempotencyKey, t.ID)
	}
	e.overlay(t)
	return t, true, nil
}

// Get returns the owner's transfer id with live progress, or ErrNotFound.
func (e *Engine) Get(ctx context.Context, owner, id string) (*Transfer, error) {
	t, err := e.db.get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	e.overlay(t)
	return t, nil
}

// List returns up to limit (default 100, at most 1000) of the owner's transfers, newest first,
// optionally only those in status.
func (e *Engine) List(ctx context.Context, owner string, status Status, limit int) ([]Transfer, error) {
	if status != "" && !status.valid() {
		return nil, &FieldError{Field: "status", Message: "must be one of queued, running, retrying, succeeded, failed, canceled"}
	}
	if limit <= 0 {
		limit = 100
	}
	ts, err := e.db.list(ctx, owner, status, min(limit, 1000))
	if err != nil {
		return nil, err
	}
	for i := range ts {
		e.overlay(&ts[i])
	}
	return ts, nil
}

// Items returns up to limit (default 1000, at most 10000) items of the owner's transfer with
// seq greater than after, optionally of one status.
func (e *Engine) Items(ctx context.Context, owner, id string, after int64, limit int, status ItemStatus) ([]Item, error) {
	switch status {
	case "", ItemPending, ItemDone, ItemSkipped, ItemFailed:
	default:
		return nil, &FieldError{Field: "status", Message: "must be one of pending, done, skipped, failed"}
	}
	t, err := e.db.get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1000
	}
	items, err := e.db.items(ctx, id, after, min(limit, 10000), status)
	if err != nil {
		return nil, err
	}
	rs, err := e.db.ranges(ctx, id)
	if err != nil {
		return nil, err
	}
	ups, err := e.db.uploads(ctx, id) // files of an object transfer in flight: ranges are parts
	if err != nil {
		return nil, err
	}
	for i := range items {
		it := &items[i]
		if it.Kind != KindFile {
			continue
		}
		it.Ranges = rangesOf(it.Size, t.ChunkSize)
		if u := ups[it.Seq]; u != nil && u.PartSize > 0 && it.Status == ItemPending {
			it.Ranges, it.RangesDone = rangesOf(it.Size, u.PartSize), len(u.Parts)
			continue
		}
		switch {
		case it.Status == ItemDone:
			it.RangesDone = it.Ranges
		case it.Ranges > 1:
			it.RangesDone = len(rs[it.Seq])
		}
	}
	return items, nil
}

// Cancel stops the owner's transfer if it has not finished and removes its temporary files.
// A run on this instance is interrupted and waited for; a run elsewhere notices at its next
// finished range or heartbeat. It returns the transfer's state afterwards.
func (e *Engine) Cancel(ctx context.Context, owner, id string) (*Transfer, error) {
	t, err := e.db.get(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	res, err := e.db.cancel(ctx, owner, id, time.Now())
	if err != nil {
		return nil, err
	}
	if res.Changed {
		e.mu.Lock()
		r := e.runs[id]
		e.mu.Unlock()
		switch {
		case r != nil:
			r.cancel(errUserCanceled)
			select {
			case <-r.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("cancel %s: waiting for the run to stop: %w", id, ctx.Err())
			}
		case !res.LeaseLive:
			if err := e.cleanupIdle(ctx, t); err != nil {
				e.log.Warn("transfer canceled; removing temporary files failed", "id", id, "err", err)
			}
		}
		// Otherwise a run on another instance notices at its next range or heartbeat, stops
		// and removes its temporary files (or, if it died, the reaper does once its lease
		// expires).
		e.log.Info("transfer canceled", "id", id, "owner", owner)
	}
	return e.Get(ctx, owner, id)
}

// cleanupIdle removes the temporary files of a transfer no run is working on (and aborts its
// uploads to object storage).
func (e *Engine) cleanupIdle(ctx context.Context, t *Transfer) error {
	if err := e.abortTransferUploads(ctx, t); err != nil {
		return err
	}
	items, err := e.db.items(ctx, t.ID, -1, 0, ItemPending)
	if err != nil {
		return err
	}
	var staged []*Item
	for i := range items {
		if items[i].staged && items[i].Kind == KindFile {
			staged = append(staged, &items[i])
		}
	}
	if len(staged) == 0 {
		return nil
	}
	dst, err := e.resolver.Resolve(ctx, t.Owner, t.Destination.System)
	if err != nil {
		return fmt.Errorf("resolve destination: %w", err)
	}
	return removeTemps(ctx, e.pool, dst.Target, t.ID, staged, e.cfg.OpenTimeout)
}

// overlay replaces t's progress with the live figures of a run on this instance.
func (e *Engine) overlay(t *Transfer) {
	e.mu.Lock()
	r := e.runs[t.ID]
	e.mu.Unlock()
	if r != nil && !t.Status.Terminal() {
		p := r.progress()
		t.BytesTotal, t.BytesDone, t.BytesRead = p.bytesTotal, p.bytesDone, p.bytesRead
		t.FilesTotal, t.FilesDone, t.FilesFailed, t.FilesSkipped = p.filesTotal, p.filesDone, p.filesFailed, p.filesSkipped
		t.RateBytesPerS, t.Streams = p.rate, p.streams
	}
	if t.Status == StatusRunning && t.RateBytesPerS > 0 && t.BytesTotal > t.BytesDone {
		eta := int64(float64(t.BytesTotal-t.BytesDone) / t.RateBytesPerS)
		t.ETAS = &eta
	} else if t.Status == StatusSucceeded {
		zero := int64(0)
		t.ETAS = &zero
	}
}

// worker is the River worker for transfer jobs.
type worker struct {
	river.WorkerDefaults[jobArgs]
	e *Engine
}

// Timeout disables River's job timeout: a transfer is bounded by its own deadline.
func (w *worker) Timeout(*river.Job[jobArgs]) time.Duration { return -1 }

// Work runs or resumes the transfer.
func (w *worker) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	err := w.e.runTransfer(ctx, job.Args.TransferID)
	if errors.Is(err, errRequeue) {
		return river.JobSnooze(0)
	}
	if errors.Is(err, errOwnerBusy) {
		return river.JobSnooze(ownerBusySnooze)
	}
	if errors.Is(err, errRunningHere) {
		return river.JobSnooze(w.e.cfg.LeaseTTL / 3)
	}
	if errors.Is(err, errSlowRequeue) {
		return river.JobSnooze(w.e.cfg.RetryBase)
	}
	if err != nil && job.Attempt >= job.MaxAttempts {
		w.e.failHard(job.Args.TransferID, err)
	}
	return err
}

// failHard marks a transfer failed when its job gives up.
func (e *Engine) failHard(id string, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := e.db.get(ctx, "", id)
	if err != nil {
		return
	}
	p := progress{bytesTotal: t.BytesTotal, bytesDone: t.BytesDone, bytesRead: t.BytesRead, filesTotal: t.FilesTotal,
		filesDone: t.FilesDone, filesFailed: t.FilesFailed, filesSkipped: t.FilesSkipped, streams: t.Streams}
	if err := e.db.finish(ctx, id, "", StatusFailed, "giving up: "+cause.Error(), p, time.Now()); err != nil {
		e.log.Error("mark transfer failed", "id", id, "err", err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// metrics are the engine's Prometheus counters.
type metrics struct {
	bytesRead    prometheus.Counter
	bytesWritten prometheus.Counter
	tarFiles     prometheus.Counter
	renamed      prometheus.Counter
	runs         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		bytesRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sshapi_transfer_source_bytes_read_total",
			Help: "Bytes read from transfer sources over SFTP, re-sent ranges included.",
		}),
		bytesWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sshapi_transfer_bytes_written_total",
			Help: "Bytes of finished ranges and files written to transfer destinations (server-side copies included).",
		}),
		tarFiles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sshapi_transfer_tar_files_total",
			Help: "Small files written to transfer destinations by tar batches (others go over SFTP), before verification.",
		}),
		renamed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sshapi_transfer_batch_renamed_files_total",
			Help: "Verified files renamed into place by one destination command per batch (others are renamed over SFTP).",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sshapi_transfer_runs_total",
			Help: "Transfer runs by outcome.",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.bytesRead, m.bytesWritten, m.tarFiles, m.renamed, m.runs)
	}
	return m
}
