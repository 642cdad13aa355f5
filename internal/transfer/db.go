package transfer

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sshapi/sshapi/internal/store/sqlite"
)

//go:embed migrations/*.sql
var migrations embed.FS

// OpenSQLite opens (creating if needed) the SQLite file that holds transfers and River's job
// tables, and applies both sets of migrations. The pool has one connection, as River's SQLite
// driver recommends: SQLite runs one writer at a time anyway, and a single connection can never
// see SQLITE_BUSY. Close it after the Engine has stopped.
func OpenSQLite(ctx context.Context, path string) (*sql.DB, error) {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("transfer db: migrations: %w", err)
	}
	db, err := sqlite.OpenFile(ctx, path, 1, fsys)
	if err != nil {
		return nil, fmt.Errorf("transfer db: %w", err)
	}
	db.SetConnMaxLifetime(0)
	m, err := rivermigrate.New(riversqlite.New(db), nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("transfer db %s: river migrations: %w", path, err)
	}
	return db, nil
}

// db is the transfer tables' data access.
type db struct{ sql *sql.DB }

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return micros(*t)
}

const transferCols = `id, owner, COALESCE(idem_key, ''), status, error, src_system, src_path, dst_system, dst_path,
	recursive, sync, verify, streams, chunk_size, same_system, bytes_total, bytes_done, files_total, files_done,
	files_failed, files_skipped, bytes_read, rate, attempts, created_at, started_at, finished_at, deadline,
	streams_req, planned`

type scanner interface{ Scan(dest ...any) error }

func scanTransfer(s scanner) (*Transfer, error) {
	var t Transfer
	var created, deadline int64
	var started, finished sql.NullInt64
	err := s.Scan(&t.ID, &t.Owner, &t.IdempotencyKey, &t.Status, &t.Error, &t.Source.System, &t.Source.Path,
		&t.Destination.System, &t.Destination.Path, &t.Recursive, &t.Sync, &t.Verify, &t.Streams, &t.ChunkSize,
		&t.SameSystem, &t.BytesTotal, &t.BytesDone, &t.FilesTotal, &t.FilesDone, &t.FilesFailed, &t.FilesSkipped,
		&t.BytesRead, &t.RateBytesPerS, &t.Attempts, &created, &started, &finished, &deadline, &t.streamsReq, &t.planned)
	if err != nil {
		return nil, err
	}
	t.CreatedAt, t.Deadline = fromMicros(created), fromMicros(deadline)
	if started.Valid {
		v := fromMicros(started.Int64)
		t.StartedAt = &v
	}
	if finished.Valid {
		v := fromMicros(finished.Int64)
		t.FinishedAt = &v
	}
	return &t, nil
}

// insertTransfer adds t in tx with its normalized request.
func (d *db) insertTransfer(ctx context.Context, tx *sql.Tx, t *Transfer, req Request) error {
	reqJSON, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	var key any
	if t.IdempotencyKey != "" {
		key = t.IdempotencyKey
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO transfers (id, owner, idem_key, request, status, src_system, src_path,
		dst_system, dst_path, recursive, sync, verify, streams_req, chunk_size, same_system, created_at, deadline)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.Owner, key, string(reqJSON), t.Status, t.Source.System, t.Source.Path, t.Destination.System,
		t.Destination.Path, t.Recursive, t.Sync, t.Verify, req.Streams, t.ChunkSize, t.SameSystem,
		micros(t.CreatedAt), micros(t.Deadline))
	if err != nil {
		return fmt.Errorf("insert transfer: %w", err)
	}
	return nil
}

// byKey returns the owner's transfer with idempotency key and its stored request.
func (d *db) byKey(ctx context.Context, owner, key string) (*Transfer, Request, error) {
	row := d.sql.QueryRowContext(ctx, `SELECT `+transferCols+`, request FROM transfers WHERE owner = ? AND idem_key = ?`, owner, key)
	var req string
	t, err := scanTransfer(scanFunc(func(dest ...any) error { return row.Scan(append(dest, &req)...) }))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, Request{}, fmt.Errorf("%w: key %q", ErrNotFound, key)
	}
	if err != nil {
		return nil, Request{}, fmt.Errorf("load transfer by key: %w", err)
	}
	var r Request
	if err := json.Unmarshal([]byte(req), &r); err != nil {
		return nil, Request{}, fmt.Errorf("decode stored request: %w", err)
	}
	return t, r, nil
}

type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// get returns transfer id; owner "" matches any owner (the engine's own use).
func (d *db) get(ctx context.Context, owner, id string) (*Transfer, error) {
	q := `SELECT ` + transferCols + ` FROM transfers WHERE id = ?`
	args := []any{id}
	if owner != "" {
		q += ` AND owner = ?`
		args = append(args, owner)
	}
	t, err := scanTransfer(d.sql.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load transfer: %w", err)
	}
	return t, nil
}

// list returns up to limit of the owner's transfers, newest first, optionally of one status.
func (d *db) list(ctx context.Context, owner string, status Status, limit int) ([]Transfer, error) {
	q := `SELECT ` + transferCols + ` FROM transfers WHERE owner = ?`
	args := []any{owner}
	if status != "" {
		q += ` AND status = ?`
		args = append(args, status)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := d.sql.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list transfers: %w", err)
	}
	defer rows.Close()
	out := []Transfer{}
	for rows.Next() {
		t, err := scanTransfer(rows)
		if err != nil {
			return nil, fmt.Errorf("list transfers: %w", err)
		}
		out = append(out, *t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list transfers: %w", err)
	}
	return out, nil
}

// acquireLease makes leaseOwner the runner of transfer id until until, if nobody else holds a
// live lease and the transfer is not finished. It counts the attempt and marks the transfer
// running.
func (d *db) acquireLease(ctx context.Context, id, leaseOwner string, now, until time.Time) (bool, error) {
	res, err := d.sql.ExecContext(ctx, `UPDATE transfers SET lease_owner = ?, lease_until = ?, status = 'running',
		attempts = attempts + 1, started_at = COALESCE(started_at, ?), error = ''
		WHERE id = ? AND status IN ('queued', 'running') AND (lease_owner = '' OR lease_owner = ? OR lease_until < ?)`,
		leaseOwner, micros(until), micros(now), id, leaseOwner, micros(now))
	if err != nil {
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// progress is what a run reports on every heartbeat.
type progress struct {
	bytesTotal, bytesDone, bytesRead                 int64
	filesTotal, filesDone, filesFailed, filesSkipped int64
	rate                                             float64
	streams                                          int
}

// heartbeat extends the lease and records progress. It returns the transfer's status and whether
// leaseOwner still holds the lease.
func (d *db) heartbeat(ctx context.Context, id, leaseOwner string, until time.Time, p progress) (Status, bool, error) {
	var st Status
	var holder string
	err := d.sql.QueryRowContext(ctx, `UPDATE transfers SET lease_until = CASE WHEN lease_owner = ? THEN ? ELSE lease_until END,
		bytes_total = ?, bytes_done = ?, bytes_read = ?, files_total = ?, files_done = ?, files_failed = ?,
		files_skipped = ?, rate = ?, streams = ? WHERE id = ? RETURNING status, lease_owner`,
		leaseOwner, micros(until), p.bytesTotal, p.bytesDone, p.bytesRead, p.filesTotal, p.filesDone, p.filesFailed,
		p.filesSkipped, p.rate, p.streams, id).Scan(&st, &holder)
	if err != nil {
		return "", false, fmt.Errorf("heartbeat: %w", err)
	}
	return st, holder == leaseOwner, nil
}

// finish records the end of a run: status (queued to hand back, or a terminal one), error text
// and final progress, releasing the lease. A transfer already canceled stays canceled.
func (d *db) finish(ctx context.Context, id, leaseOwner string, st Status, errText string, p progress, now time.Time) error {
	var finished any
	if st.Terminal() {
		finished = micros(now)
	}
	_, err := d.sql.ExecContext(ctx, `UPDATE transfers SET status = CASE WHEN status = 'canceled' THEN status ELSE ? END,
		error = CASE WHEN status = 'canceled' THEN error ELSE ? END,
		finished_at = CASE WHEN status = 'canceled' THEN COALESCE(finished_at, ?) ELSE ? END,
		lease_owner = '', lease_until = 0,
		bytes_total = ?, bytes_done = ?, bytes_read = ?, files_total = ?, files_done = ?, files_failed = ?,
		files_skipped = ?, rate = ?, streams = ? WHERE id = ? AND (lease_owner = ? OR lease_owner = '')`,
		st, errText, micros(now), finished, p.bytesTotal, p.bytesDone, p.bytesRead, p.filesTotal, p.filesDone,
		p.filesFailed, p.filesSkipped, p.rate, p.streams, id, leaseOwner)
	if err != nil {
		return fmt.Errorf("finish transfer: %w", err)
	}
	return nil
}

// cancel marks a transfer that is not finished canceled. It reports whether it changed anything.
func (d *db) cancel(ctx context.Context, owner, id string, now time.Time) (bool, error) {
	res, err := d.sql.ExecContext(ctx, `UPDATE transfers SET status = 'canceled', error = 'canceled by the user',
		finished_at = ? WHERE id = ? AND owner = ? AND status IN ('queued', 'running')`, micros(now), id, owner)
	if err != nil {
		return false, fmt.Errorf("cancel transfer: %w", err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// plan stores the items of a transfer and its totals, replacing any earlier partial plan.
func (d *db) plan(ctx context.Context, id string, items []Item, streams int) error {
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store plan: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.ExecContext(ctx, `DELETE FROM transfer_items WHERE transfer_id = ?`, id); err != nil {
		return fmt.Errorf("store plan: %w", err)
	}
	const batch = 200
	var total, files int64
	for start := 0; start < len(items); start += batch {
		end := min(start+batch, len(items))
		var sb strings.Builder
		sb.WriteString(`INSERT INTO transfer_items (transfer_id, seq, kind, src, dst, size, mtime, mode, link_target, status) VALUES `)
		args := make([]any, 0, (end-start)*10)
		for i, it := range items[start:end] {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?,?,?,?,?,?,?,?,?,?)")
			args = append(args, id, it.Seq, it.Kind, it.Source, it.Destination, it.Size, it.mtime, it.mode, it.linkTarget, it.Status)
		}
		if _, err := tx.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("store plan: %w", err)
		}
	}
	for _, it := range items {
		if it.Kind == KindFile {
			total += it.Size
			files++
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE transfers SET planned = 1, bytes_total = ?, files_total = ?, streams = ? WHERE id = ?`,
		total, files, streams, id); err != nil {
		return fmt.Errorf("store plan: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store plan: %w", err)
	}
	return nil
}

const itemCols = `seq, kind, src, dst, size, mtime, mode, link_target, status, bytes_done, attempts, error, sha256, staged`

func scanItem(s scanner) (Item, error) {
	var it Item
	err := s.Scan(&it.Seq, &it.Kind, &it.Source, &it.Destination, &it.Size, &it.mtime, &it.mode, &it.linkTarget,
		&it.Status, &it.BytesDone, &it.Attempts, &it.Error, &it.SHA256, &it.staged)
	return it, err
}

// items returns a transfer's items in seq order, after seq after, at most limit (0: all),
// optionally of one status.
func (d *db) items(ctx context.Context, id string, after int64, limit int, status ItemStatus) ([]Item, error) {
	q := `SELECT ` + itemCols + ` FROM transfer_items WHERE transfer_id = ? AND seq > ?`
	args := []any{id, after}
	if status != "" {
		q += ` AND status = ?`
		args = append(args, status)
	}
	q += ` ORDER BY seq`
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := d.sql.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("load items: %w", err)
	}
	defer rows.Close()
	out := []Item{}
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, fmt.Errorf("load items: %w", err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load items: %w", err)
	}
	return out, nil
}

// ranges returns the finished ranges of a transfer's items by seq.
func (d *db) ranges(ctx context.Context, id string) (map[int64]map[int]bool, error) {
	rows, err := d.sql.QueryContext(ctx, `SELECT seq, idx FROM transfer_ranges WHERE transfer_id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("load ranges: %w", err)
	}
	defer rows.Close()
	out := map[int64]map[int]bool{}
	for rows.Next() {
		var seq int64
		var idx int
		if err := rows.Scan(&seq, &idx); err != nil {
			return nil, fmt.Errorf("load ranges: %w", err)
		}
		if out[seq] == nil {
			out[seq] = map[int]bool{}
		}
		out[seq][idx] = true
	}
	return out, rows.Err()
}

// rangeDone records that range idx of item seq is written at the destination.
func (d *db) rangeDone(ctx context.Context, id string, seq int64, idx int, bytesDone int64) error {
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record range: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO transfer_ranges (transfer_id, seq, idx) VALUES (?, ?, ?)`, id, seq, idx); err != nil {
		return fmt.Errorf("record range: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE transfer_items SET bytes_done = ? WHERE transfer_id = ? AND seq = ?`, bytesDone, id, seq); err != nil {
		return fmt.Errorf("record range: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record range: %w", err)
	}
	return nil
}

// resetRanges forgets the finished ranges of item seq (its temporary file is gone or its source
// changed).
func (d *db) resetRanges(ctx context.Context, id string, seq int64) error {
	if _, err := d.sql.ExecContext(ctx, `DELETE FROM transfer_ranges WHERE transfer_id = ? AND seq = ?`, id, seq); err != nil {
		return fmt.Errorf("reset ranges: %w", err)
	}
	return nil
}

// saveItems writes the mutable fields of items in one transaction.
func (d *db) saveItems(ctx context.Context, id string, items []*Item) error {
	if len(items) == 0 {
		return nil
	}
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("save items: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	stmt, err := tx.PrepareContext(ctx, `UPDATE transfer_items SET status = ?, size = ?, mtime = ?, bytes_done = ?,
		attempts = ?, error = ?, sha256 = ?, staged = ? WHERE transfer_id = ? AND seq = ?`)
	if err != nil {
		return fmt.Errorf("save items: %w", err)
	}
	defer stmt.Close()
	for _, it := range items {
		if _, err := stmt.ExecContext(ctx, it.Status, it.Size, it.mtime, it.BytesDone, it.Attempts, it.Error, it.SHA256, it.staged, id, it.Seq); err != nil {
			return fmt.Errorf("save items: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("save items: %w", err)
	}
	return nil
}
