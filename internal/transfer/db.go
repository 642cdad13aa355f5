package transfer

import (
	"context"
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

func (d *db) plan(ctx context.Context, id string, items []Item, streams int) error {
	return d.p.ItemsPlan(ctx, &ItemsPlanParams{ID: id, Items: items, Streams: streams})
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
