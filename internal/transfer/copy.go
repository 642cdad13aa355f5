package transfer

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/riverqueue/river"
)

// CopyResult counts what CopyTransfers copied.
type CopyResult struct {
	Transfers, Items, Ranges int
	// Requeued counts unfinished transfers, queued again on the target to resume there.
	Requeued int
}

// CopyTransfers copies every transfer with its items and finished ranges from one database to
// another (a deployment moving from SQLite to PostgreSQL, with no instance running). Unfinished
// transfers are queued again on the target, with their finished ranges kept, so they resume
// there. The target must hold no transfers yet.
func CopyTransfers(ctx context.Context, from, to Persistence) (CopyResult, error) {
	var res CopyResult
	src, ok1 := from.(*sqlDB)
	dst, ok2 := to.(*sqlDB)
	if !ok1 || !ok2 {
		return res, errors.New("copy transfers: unsupported persistence")
	}
	var n int
	if err := dst.db.QueryRowContext(ctx, `SELECT count(*) FROM transfers`).Scan(&n); err != nil {
		return res, fmt.Errorf("copy transfers: %w", err)
	}
	if n > 0 {
		return res, fmt.Errorf("copy transfers: the target already holds %d transfers", n)
	}
	inserter, err := river.NewClient(dst.d.river, &river.Config{})
	if err != nil {
		return res, fmt.Errorf("copy transfers: river client: %w", err)
	}
	rows, err := src.db.QueryContext(ctx, `SELECT `+transferCols+`, request FROM transfers ORDER BY created_at, id`)
	if err != nil {
		return res, fmt.Errorf("copy transfers: %w", err)
	}
	type row struct {
		t   *Transfer
		req string
	}
	var all []row
	for rows.Next() {
		var req string
		t, err := scanTransfer(scanFunc(func(dest ...any) error { return rows.Scan(append(dest, &req)...) }))
		if err != nil {
			rows.Close()
			return res, fmt.Errorf("copy transfers: %w", err)
		}
		all = append(all, row{t, req})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("copy transfers: %w", err)
	}
	for _, r := range all {
		if err := copyOne(ctx, src, dst, inserter, r.t, r.req, &res); err != nil {
			return res, fmt.Errorf("copy transfer %s: %w", r.t.ID, err)
		}
	}
	return res, nil
}

func copyOne(ctx context.Context, src, dst *sqlDB, inserter *river.Client[*sql.Tx], t *Transfer, reqJSON string, res *CopyResult) error {
	var req Request
	if err := json.Unmarshal([]byte(reqJSON), &req); err != nil {
		return fmt.Errorf("decode request: %w", err)
	}
	requeue := !t.Status.Terminal()
	if requeue {
		t.Status, t.NextAttemptAt = StatusQueued, nil
	}
	tx, err := dst.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if err := dst.TransferInsert(ctx, tx, &TransferInsertParams{Transfer: t, Request: req}); err != nil {
		return err
	}
	var finished any
	if t.FinishedAt != nil {
		finished = micros(*t.FinishedAt)
	}
	var started any
	if t.StartedAt != nil {
		started = micros(*t.StartedAt)
	}
	if _, err := tx.ExecContext(ctx, dst.q(`UPDATE transfers SET status = ?, error = ?, streams = ?, bytes_total = ?, bytes_done = ?,
		files_total = ?, files_done = ?, files_failed = ?, files_skipped = ?, bytes_read = ?, rate = ?, attempts = ?,
		started_at = ?, finished_at = ?, retries = ?, slow_runs = ? WHERE id = ?`),
		string(t.Status), t.Error, t.Streams, t.BytesTotal, t.BytesDone, t.FilesTotal, t.FilesDone, t.FilesFailed, t.FilesSkipped,
		t.BytesRead, t.RateBytesPerS, t.Attempts, started, finished, t.Retries, t.slowRuns, t.ID); err != nil {
		return err
	}
	if requeue {
		if _, err := inserter.InsertTx(ctx, tx, jobArgs{TransferID: t.ID}, &river.InsertOpts{Queue: queueName, MaxAttempts: 50}); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		res.Requeued++
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	res.Transfers++
	items, err := src.ItemsList(ctx, &ItemsListParams{ID: t.ID, After: -1})
	if err != nil {
		return err
	}
	// A transfer whose walk was interrupted keeps the chunks it stored (and what was done with
	// them): its next run walks on from them.
	if t.planned {
		err = dst.ItemsPlan(ctx, &ItemsPlanParams{ID: t.ID, Items: items, Streams: t.Streams})
	} else {
		err = dst.ItemsAppend(ctx, &ItemsAppendParams{ID: t.ID, Items: items})
	}
	if err != nil {
		return err
	}
	ranges, err := src.RangesList(ctx, &TransferGetParams{ID: t.ID})
	if err != nil {
		return err
	}
	for seq, idxs := range ranges {
		for idx := range idxs {
			if _, err := dst.RangeDone(ctx, &RangeDoneParams{ID: t.ID, Seq: seq, Idx: idx}); err != nil {
				return err
			}
			res.Ranges++
		}
	}
	ptrs := make([]*Item, len(items))
	for i := range items {
		ptrs[i] = &items[i]
	}
	if err := dst.ItemsSave(ctx, &ItemsSaveParams{ID: t.ID, Items: ptrs}); err != nil {
		return err
	}
	res.Items += len(items)
	return nil
}
