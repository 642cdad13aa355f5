package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sshapi/sshapi/internal/store"
)

// runner is what *pgxpool.Pool and pgx.Tx share.
type runner interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// sharedQuerier runs the queries written once for every driver (store.Querier) on PostgreSQL,
// renumbering their placeholders. pool is set outside a transaction, r always.
type sharedQuerier struct {
	pool *pgxpool.Pool
	r    runner
}

func newSharedQuerier(pool *pgxpool.Pool) sharedQuerier { return sharedQuerier{pool: pool, r: pool} }

func (q sharedQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.r.Exec(ctx, store.Rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (q sharedQuerier) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := q.r.Query(ctx, store.Rebind(query), args...)
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

func (q sharedQuerier) IsConflict(err error) bool { return isCode(err, uniqueViolation) }

func (q sharedQuerier) InTx(ctx context.Context, fn func(store.Querier) error) error {
	if q.pool == nil {
		return fmt.Errorf("postgres: nested transaction")
	}
	return pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error { return fn(sharedQuerier{r: tx}) })
}

// LockKey takes a transaction-scoped advisory lock on the key's hash.
func (q sharedQuerier) LockKey(ctx context.Context, key string) error {
	_, err := q.r.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, key)
	return err
}
