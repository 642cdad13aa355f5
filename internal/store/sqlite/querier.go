package sqlite

import (
	"context"
	"database/sql"

	sqlite3 "modernc.org/sqlite/lib"
)

// sharedQuerier runs the queries written once for every driver (store.Querier) on SQLite.
type sharedQuerier struct{ db *sql.DB }

func (q sharedQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sharedQuerier) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := q.db.QueryContext(ctx, query, args...)
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
