package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sshapi/sshapi/internal/store"
)

// runner is what *sql.DB and *sql.Tx share.
type runner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// sharedQuerier runs the queries written once for every driver (store.Querier) on SQLite. db is
// set outside a transaction, r always.
type sharedQuerier struct {
	db *sql.DB
	r  runner
}

func newSharedQuerier(db *sql.DB) sharedQuerier { return sharedQuerier{db: db, r: db} }

func (q sharedQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.r.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sharedQuerier) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := q.r.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (q sharedQuerier) IsConflict(err error) bool {
	return isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) || isConstraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE)
}

// InTx begins an IMMEDIATE transaction (the connection's _txlock): it holds the write lock
// from its start, so transactions run one at a time.
func (q sharedQuerier) InTx(ctx context.Context, fn func(store.Querier) error) error {
	if q.db == nil {
		return fmt.Errorf("sqlite: nested transaction")
	}
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := fn(sharedQuerier{r: tx}); err != nil {
		_ = tx.Rollback() // the error from fn is the one that matters
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// LockKey has nothing to do: the transaction already excludes every other writer.
func (q sharedQuerier) LockKey(context.Context, string) error { return nil }
