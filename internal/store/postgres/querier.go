package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sshapi/sshapi/internal/store"
)

// sharedQuerier runs the queries written once for every driver (store.Querier) on PostgreSQL,
// renumbering their placeholders.
type sharedQuerier struct{ pool *pgxpool.Pool }

func (q sharedQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.pool.Exec(ctx, store.Rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (q sharedQuerier) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := q.pool.Query(ctx, store.Rebind(query), args...)
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
