package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Querier is what a driver lends to queries written once for every database: "?" placeholders
// (a PostgreSQL Querier renumbers them; see Rebind), times as Unix microseconds in BIGINT
// columns, and no dialect-specific syntax.
type Querier interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a query and calls row once per result row with a scan function.
	Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error
	// IsConflict reports whether err is a unique-constraint violation.
	IsConflict(err error) bool
	// InTx runs fn with a Querier bound to one transaction, committed when fn returns nil and
	// rolled back otherwise.
	InTx(ctx context.Context, fn func(q Querier) error) error
	// LockKey, inside InTx, serializes the transactions that lock the same key until they end
	// (PostgreSQL: a transaction-scoped advisory lock; SQLite runs one write transaction at a
	// time already).
	LockKey(ctx context.Context, key string) error
}

// Rebind turns the "?" placeholders of q into PostgreSQL's "$1", "$2", …. The queries written
// for a Querier hold no "?" inside literals.
func Rebind(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SQLTemps implements TempStore once for every driver over a Querier. The table is temp_files
// (migrations 0007 and 0009 of each driver, with the same columns and types).
type SQLTemps struct {
	// Q runs the queries.
	Q Querier
}

var _ TempStore = SQLTemps{}

const tempColumns = `id, system_owner, system_id, dir, name, created_at, lease_until, bucket, upload_id`

// RecordTemp implements TempStore.
func (s SQLTemps) RecordTemp(ctx context.Context, t *TempFile) error {
	if err := ValidateKey(t.SystemOwner, t.SystemID); err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	_, err := s.Q.Exec(ctx, `INSERT INTO temp_files (`+tempColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.SystemOwner, t.SystemID, t.Dir, t.Name, now.UnixMicro(), t.LeaseUntil.UnixMicro(), t.Bucket, t.UploadID)
	if s.Q.IsConflict(err) {
		return fmt.Errorf("temp file %s: %w", t.ID, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("record temp file: %w", err)
	}
	t.CreatedAt = now
	return nil
}

// maxBatch bounds the ids of one statement (SQLite allows 32,766 parameters).
const maxBatch = 500

// RenewTemps implements TempStore.
func (s SQLTemps) RenewTemps(ctx context.Context, ids []string, until time.Time) error {
	return inBatches(ids, func(ids []string) error {
		args := append([]any{until.UnixMicro()}, anys(ids)...)
		if _, err := s.Q.Exec(ctx, `UPDATE temp_files SET lease_until = ? WHERE id IN (`+marks(len(ids))+`)`, args...); err != nil {
			return fmt.Errorf("renew temp files: %w", err)
		}
		return nil
	})
}

// ForgetTemps implements TempStore.
func (s SQLTemps) ForgetTemps(ctx context.Context, ids []string) error {
	return inBatches(ids, func(ids []string) error {
		if _, err := s.Q.Exec(ctx, `DELETE FROM temp_files WHERE id IN (`+marks(len(ids))+`)`, anys(ids)...); err != nil {
			return fmt.Errorf("forget temp files: %w", err)
		}
		return nil
	})
}

// ClaimTemps implements TempStore. The outer condition is evaluated again on each row under
// its row lock (PostgreSQL, READ COMMITTED) or inside SQLite's single writer, so two
// instances claiming at once never both get a record.
func (s SQLTemps) ClaimTemps(ctx context.Context, now, until time.Time, limit int) ([]TempFile, error) {
	var out []TempFile
	err := s.Q.Query(ctx, `UPDATE temp_files SET lease_until = ?
		WHERE lease_until < ? AND id IN (SELECT id FROM temp_files WHERE lease_until < ? ORDER BY lease_until LIMIT ?)
		RETURNING `+tempColumns,
		[]any{until.UnixMicro(), now.UnixMicro(), now.UnixMicro(), limit},
		func(scan func(...any) error) error {
			var t TempFile
			var created, lease int64
			if err := scan(&t.ID, &t.SystemOwner, &t.SystemID, &t.Dir, &t.Name, &created, &lease, &t.Bucket, &t.UploadID); err != nil {
				return err
			}
			t.CreatedAt, t.LeaseUntil = time.UnixMicro(created).UTC(), time.UnixMicro(lease).UTC()
			out = append(out, t)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("claim temp files: %w", err)
	}
	return out, nil
}

func inBatches(ids []string, fn func([]string) error) error {
	for len(ids) > 0 {
		n := min(len(ids), maxBatch)
		if err := fn(ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func anys(ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
