package transfer

import (
	"context"
	"database/sql"
	"time"
)

// db adapts Persistence to the short calls a run makes.
type db struct{ p Persistence }

// progress is what a run reports on every heartbeat.
type progress struct {
	bytesTotal, bytesDone, bytesRead                 int64
	filesTotal, filesDone, filesFailed, filesSkipped int64
	rate                                             float64
	streams                                          int
}

func (d *db) get(ctx context.Context, owner, id string) (*Transfer, error) {
	return d.p.TransferGet(ctx, &TransferGetParams{Owner: owner, ID: id})
}

func (d *db) acquireLease(ctx context.Context, id, runner string, now, until time.Time, maxPerOwner int) (LeaseResult, error) {
	return d.p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: id, Runner: runner, Now: now, Until: until, MaxRunningPerOwner: maxPerOwner})
}

func (d *db) heartbeat(ctx context.Context, id, runner string, until time.Time, p progress) (Status, bool, error) {
	return d.p.LeaseHeartbeat(ctx, &LeaseHeartbeatParams{ID: id, Runner: runner, Until: until, Progress: p})
}

func (d *db) finish(ctx context.Context, id, runner string, st Status, errText string, p progress, now time.Time) error {
	return d.p.TransferFinish(ctx, &TransferFinishParams{ID: id, Runner: runner, Status: st, Error: errText, Progress: p, Now: now})
}

func (d *db) retrying(ctx context.Context, id, runner, errText string, next time.Time) error {
	return d.p.TransferRetrying(ctx, &TransferRetryingParams{ID: id, Runner: runner, Error: errText, NextAttempt: next})
}

func (d *db) resumed(ctx context.Context, id, runner string) error {
	return d.p.TransferResumed(ctx, &TransferLeaseParams{ID: id, Runner: runner})
}

func (d *db) slowRun(ctx context.Context, id, runner string) (int, error) {
	return d.p.TransferSlowRun(ctx, &TransferLeaseParams{ID: id, Runner: runner})
}

func (d *db) plan(ctx context.Context, id string, items []Item, streams int) error {
	return d.p.ItemsPlan(ctx, &ItemsPlanParams{ID: id, Items: items, Streams: streams})
}

func (d *db) appendItems(ctx context.Context, id string, items []Item, final bool) error {
	return d.p.ItemsAppend(ctx, &ItemsAppendParams{ID: id, Items: items, Final: final})
}

func (d *db) items(ctx context.Context, id string, after int64, limit int, status ItemStatus) ([]Item, error) {
	return d.p.ItemsList(ctx, &ItemsListParams{ID: id, After: after, Limit: limit, Status: status})
}

func (d *db) ranges(ctx context.Context, id string) (map[int64]map[int]bool, error) {
	return d.p.RangesList(ctx, &TransferGetParams{ID: id})
}

func (d *db) rangeDone(ctx context.Context, id string, seq int64, idx int, bytesDone, bytesRead int64) (Status, error) {
	return d.p.RangeDone(ctx, &RangeDoneParams{ID: id, Seq: seq, Idx: idx, BytesDone: bytesDone, BytesRead: bytesRead})
}

func (d *db) resetRanges(ctx context.Context, id string, seq int64) error {
	return d.p.RangesReset(ctx, &RangesResetParams{ID: id, Seq: seq})
}

func (d *db) saveItems(ctx context.Context, id string, items []*Item) error {
	return d.p.ItemsSave(ctx, &ItemsSaveParams{ID: id, Items: items})
}

func (d *db) stageItems(ctx context.Context, id string, items []*Item) error {
	return d.p.ItemsStage(ctx, &ItemsSaveParams{ID: id, Items: items})
}

func (d *db) begin(ctx context.Context) (*sql.Tx, error) { return d.p.DB().BeginTx(ctx, nil) }

func (d *db) insert(ctx context.Context, tx *sql.Tx, t *Transfer, req Request) error {
	return d.p.TransferInsert(ctx, tx, &TransferInsertParams{Transfer: t, Request: req})
}

func (d *db) countUnfinished(ctx context.Context, tx *sql.Tx, owner string) (int, error) {
	return d.p.TransferCountUnfinished(ctx, tx, &TransferOwnerParams{Owner: owner})
}

func (d *db) getByKey(ctx context.Context, owner, key string) (*Transfer, Request, error) {
	return d.p.TransferGetByKey(ctx, &TransferGetByKeyParams{Owner: owner, Key: key})
}

func (d *db) list(ctx context.Context, owner string, status Status, limit int) ([]Transfer, error) {
	return d.p.TransferList(ctx, &TransferListParams{Owner: owner, Status: status, Limit: limit})
}

func (d *db) cancel(ctx context.Context, owner, id string, now time.Time) (CancelResult, error) {
	return d.p.TransferCancel(ctx, &TransferCancelParams{Owner: owner, ID: id, Now: now})
}

func (d *db) reap(ctx context.Context, tx *sql.Tx, now time.Time) ([]string, error) {
	return d.p.LeaseReap(ctx, tx, &LeaseReapParams{Now: now})
}

func (d *db) reapCanceled(ctx context.Context, now time.Time) ([]string, error) {
	return d.p.LeaseReapCanceled(ctx, &LeaseReapParams{Now: now})
}
