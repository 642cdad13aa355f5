package transfer

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/riverqueue/river/riverdriver"

	"github.com/sshapi/sshapi/internal/storage"
)

// Persistence is where transfers, their items and finished ranges live, next to River's job
// tables in the same database. There is one implementation per database (OpenSQLite,
// OpenPostgres), each with its own migrations; persist_contract_test.go runs one contract suite
// on both. Every method is a single statement or one transaction, so any number of instances
// may share the database.
type Persistence interface {
	// DB is the database River runs on; River's job inserts share its transactions.
	DB() *sql.DB
	// River is River's driver for DB.
	River() riverdriver.Driver[*sql.Tx]
	// Close closes the database (after the Engine has stopped).
	Close() error

	// TransferInsert adds a queued transfer in tx. An idempotency key the owner already used
	// returns an error wrapping ErrDuplicateKey.
	TransferInsert(ctx context.Context, tx *sql.Tx, p *TransferInsertParams) error
	// TransferCountUnfinished counts the owner's transfers that are not finished, in tx, holding
	// the owner's lock until tx ends so that a count-then-insert cannot race another.
	TransferCountUnfinished(ctx context.Context, tx *sql.Tx, p *TransferOwnerParams) (int, error)
	// TransferGet returns a transfer (of any owner when Owner is ""), or ErrNotFound.
	TransferGet(ctx context.Context, p *TransferGetParams) (*Transfer, error)
	// TransferGetByKey returns the owner's transfer with an idempotency key and the request
	// stored with it, or ErrNotFound.
	TransferGetByKey(ctx context.Context, p *TransferGetByKeyParams) (*Transfer, Request, error)
	// TransferList returns the owner's transfers newest first.
	TransferList(ctx context.Context, p *TransferListParams) ([]Transfer, error)
	// TransferCancel marks an unfinished transfer canceled.
	TransferCancel(ctx context.Context, p *TransferCancelParams) (CancelResult, error)
	// TransferFinish records how a run ended and releases its lease; a canceled transfer stays
	// canceled.
	TransferFinish(ctx context.Context, p *TransferFinishParams) error
	// TransferRetrying records that the run holding the lease waits to retry, and why;
	// TransferResumed that it is moving again.
	TransferRetrying(ctx context.Context, p *TransferRetryingParams) error
	TransferResumed(ctx context.Context, p *TransferLeaseParams) error
	// TransferSlowRun counts one more run of the transfer that ended too slow and returns the
	// count, kept in the database so that a restarted or another instance continues it. It
	// returns ErrNotFound when p.Runner no longer holds the lease.
	TransferSlowRun(ctx context.Context, p *TransferLeaseParams) (int, error)

	// LeaseAcquire makes p.Runner the runner of a transfer that is not finished and has no live
	// lease, unless the owner already has p.MaxRunningPerOwner live runs (on any instance).
	LeaseAcquire(ctx context.Context, p *LeaseAcquireParams) (LeaseResult, error)
	// LeaseHeartbeat extends the runner's lease and saves progress; it returns the transfer's
	// status and whether the runner still holds the lease.
	LeaseHeartbeat(ctx context.Context, p *LeaseHeartbeatParams) (Status, bool, error)
	// LeaseReap hands transfers whose lease expired back to the queue in tx and returns their
	// ids; each is returned to exactly one caller however many instances reap at once.
	LeaseReap(ctx context.Context, tx *sql.Tx, p *LeaseReapParams) ([]string, error)
	// LeaseReapCanceled releases the expired leases of canceled transfers (their runner died
	// before it removed its temporary files) and returns their ids, each to one caller.
	LeaseReapCanceled(ctx context.Context, p *LeaseReapParams) ([]string, error)

	// ItemsPlan stores a transfer's whole plan (its items and totals) and marks it planned,
	// replacing any items stored before.
	ItemsPlan(ctx context.Context, p *ItemsPlanParams) error
	// ItemsAppend adds one chunk of a plan that is stored as the source is walked (items whose
	// seqs no stored item has), in one transaction, and marks the transfer planned when
	// p.Final; the totals are the run's to record (its heartbeat does).
	ItemsAppend(ctx context.Context, p *ItemsAppendParams) error
	// ItemsList returns items in seq order.
	ItemsList(ctx context.Context, p *ItemsListParams) ([]Item, error)
	// ItemsSave writes the mutable fields of items.
	ItemsSave(ctx context.Context, p *ItemsSaveParams) error
	// ItemsStage writes items' attempts and marks them staged (a temporary file may exist),
	// leaving their other fields as saved: what a run records before it writes a batch.
	ItemsStage(ctx context.Context, p *ItemsSaveParams) error
	// RangesList returns the finished ranges of a transfer's items by seq.
	RangesList(ctx context.Context, p *TransferGetParams) (map[int64]map[int]bool, error)
	// RangeDone records a finished range and returns the transfer's status, so that a run
	// canceled through another instance stops after the range it was writing.
	RangeDone(ctx context.Context, p *RangeDoneParams) (Status, error)
	// RangesReset forgets the finished ranges of one item.
	RangesReset(ctx context.Context, p *RangesResetParams) error

	// UploadSave records the upload a file with an object-storage end is written through,
	// replacing an earlier one of the same item and forgetting its parts.
	UploadSave(ctx context.Context, p *UploadSaveParams) error
	// UploadsList returns a transfer's uploads, with their finished parts, by seq.
	UploadsList(ctx context.Context, p *TransferGetParams) (map[int64]*UploadRecord, error)
	// PartDone records a finished part and the item's bytes done, and, when p.HashState is
	// set, how far the file's SHA-256 got; like RangeDone it returns the transfer's status.
	PartDone(ctx context.Context, p *PartDoneParams) (Status, error)
	// UploadDelete forgets the upload of one item (committed or aborted) and its parts.
	UploadDelete(ctx context.Context, p *RangesResetParams) error
	// UploadsStale returns uploads the reaper should abort: those of finished transfers no
	// runner holds, and those older than p.Before whose transfer has no live runner.
	UploadsStale(ctx context.Context, p *UploadsStaleParams) ([]StaleUpload, error)
}

// ErrDuplicateKey is wrapped by TransferInsert when the owner already used the idempotency key.
// Implementations recognise it from the driver's typed error (SQLite's constraint code,
// PostgreSQL's SQLSTATE), never from error text.
var ErrDuplicateKey = errors.New("duplicate idempotency key")

// TransferInsertParams is a new transfer and its normalized request.
type TransferInsertParams struct {
	Transfer *Transfer
	Request  Request
}

// TransferOwnerParams names an owner.
type TransferOwnerParams struct{ Owner string }

// TransferGetParams names a transfer; Owner "" matches any owner.
type TransferGetParams struct{ Owner, ID string }

// TransferGetByKeyParams names an owner's idempotency key.
type TransferGetByKeyParams struct{ Owner, Key string }

// TransferListParams selects an owner's transfers, optionally of one status.
type TransferListParams struct {
	Owner  string
	Status Status
	Limit  int
}

// TransferCancelParams cancels an owner's transfer at Now.
type TransferCancelParams struct {
	Owner, ID string
	Now       time.Time
}

// CancelResult is what TransferCancel did.
type CancelResult struct {
	// Changed is false when the transfer was already finished.
	Changed bool
	// LeaseLive is true when a runner (on any instance) held a live lease: that runner stops
	// and removes its temporary files.
	LeaseLive bool
}

// TransferFinishParams ends a run.
type TransferFinishParams struct {
	ID, Runner string
	Status     Status
	Error      string
	Progress   progress
	Now        time.Time
}

// TransferRetryingParams says why the runner waits and when it tries again.
type TransferRetryingParams struct {
	ID, Runner  string
	Error       string
	NextAttempt time.Time
}

// TransferLeaseParams names a transfer and its runner.
type TransferLeaseParams struct{ ID, Runner string }

// LeaseAcquireParams claims a transfer for Runner until Until.
type LeaseAcquireParams struct {
	ID, Runner         string
	Now, Until         time.Time
	MaxRunningPerOwner int
}

// LeaseResult is the outcome of LeaseAcquire.
type LeaseResult int

// Lease outcomes.
const (
	// LeaseAcquired: the caller runs the transfer.
	LeaseAcquired LeaseResult = iota
	// LeaseTaken: another runner holds a live lease, or the transfer is finished or gone.
	LeaseTaken
	// LeaseOwnerBusy: the owner is at the running limit; try later.
	LeaseOwnerBusy
)

// LeaseHeartbeatParams extends Runner's lease and saves progress.
type LeaseHeartbeatParams struct {
	ID, Runner string
	Until      time.Time
	Progress   progress
}

// LeaseReapParams reaps leases that expired before Now.
type LeaseReapParams struct{ Now time.Time }

// ItemsPlanParams is a transfer's plan.
type ItemsPlanParams struct {
	ID      string
	Items   []Item
	Streams int
}

// ItemsAppendParams is one chunk of a transfer's plan; Final says the walk is complete.
type ItemsAppendParams struct {
	ID    string
	Items []Item
	Final bool
}

// ItemsListParams selects a transfer's items with seq after After, at most Limit (0: all),
// optionally of one status.
type ItemsListParams struct {
	ID     string
	After  int64
	Limit  int
	Status ItemStatus
}

// ItemsSaveParams are items whose mutable fields changed.
type ItemsSaveParams struct {
	ID    string
	Items []*Item
}

// RangeDoneParams records range Idx of item Seq and the item's bytes done. BytesRead, if
// larger than the stored figure, becomes the transfer's bytes_read, so that after a crash the
// next runner continues from the reads up to the last finished range, not the last heartbeat.
type RangeDoneParams struct {
	ID        string
	Seq       int64
	Idx       int
	BytesDone int64
	BytesRead int64
}

// RangesResetParams names one item.
type RangesResetParams struct {
	ID  string
	Seq int64
}

// UploadRecord is the stored state of one file's upload.
type UploadRecord struct {
	Seq      int64
	UploadID string
	// Dst is the destination path the upload becomes, as the backend names it.
	Dst      string
	PartSize int64
	// SrcETag is the source's version (S3 ETag, or size and mtime for SFTP) when the upload
	// started.
	SrcETag string
	// HashOff is how many leading bytes HashState (a marshaled sha256) has hashed.
	HashOff   int64
	HashState []byte
	// Parts are the finished parts in number order.
	Parts []storage.Part

	transient bool // not stored: a small object the backend sends whole at Commit
}

// UploadSaveParams records the upload of item Seq.
type UploadSaveParams struct {
	ID     string
	Upload UploadRecord
	Now    time.Time
}

// PartDoneParams records part Part of item Seq; HashOff and HashState, when HashState is not
// nil, the file's SHA-256 state after its first HashOff bytes.
type PartDoneParams struct {
	ID        string
	Seq       int64
	Part      storage.Part
	BytesDone int64
	BytesRead int64
	HashOff   int64
	HashState []byte
}

// UploadsStaleParams selects uploads to reap at Now.
type UploadsStaleParams struct {
	Now, Before time.Time
	Limit       int
}

// StaleUpload is an upload to abort and the transfer it belongs to.
type StaleUpload struct {
	TransferID, Owner, DstSystem string
	Seq                          int64
	UploadID, Dst                string
}
