package transfer

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sshapi/sshapi/internal/store/sqlite"
)

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrations embed.FS

// pgMigrationTable is the goose version table of the transfer tables on PostgreSQL; the store's
// migrations in the same database keep goose's default table.
const pgMigrationTable = "sshapi_transfer_migrations"

// OpenSQLite opens (creating if needed) the SQLite file that holds transfers and River's job
// tables, and applies both sets of migrations. The pool has one connection, as River's SQLite
// driver recommends: SQLite runs one writer at a time anyway, and a single connection can never
// see SQLITE_BUSY. Close it after the Engine has stopped.
func OpenSQLite(ctx context.Context, path string) (Persistence, error) {
	fsys, err := fs.Sub(migrations, "migrations/sqlite")
	if err != nil {
		return nil, fmt.Errorf("transfer db: migrations: %w", err)
	}
	db, err := sqlite.OpenFile(ctx, path, 1, fsys)
	if err != nil {
		return nil, fmt.Errorf("transfer db: %w", err)
	}
	db.SetConnMaxLifetime(0)
	drv := riversqlite.New(db)
	if err := riverMigrate(ctx, drv); err != nil {
		db.Close()
		return nil, fmt.Errorf("transfer db %s: %w", path, err)
	}
	return &sqlDB{db: db, d: dialect{
		name: "sqlite",
		isUnique: func(err error) bool {
			var se *msqlite.Error
			return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
		},
		lockOwner: func(context.Context, *sql.Tx, string) error { return nil },
		river:     drv,
	}}, nil
}

// OpenPostgres connects to the PostgreSQL database at url (postgres://…) with pgx, at most
// maxConns connections, and applies the transfer tables' and River's migrations (concurrent
// instances starting at once are serialised by advisory locks). River runs on it through
// riverdatabasesql, so the engine's code is the same as on SQLite.
func OpenPostgres(ctx context.Context, url string, maxConns int) (Persistence, error) {
	if _, err := pgconn.ParseConfig(url); err != nil { // the error text hides any password
		return nil, fmt.Errorf("transfer db: %w", err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("transfer db: %w", err)
	}
	if maxConns <= 0 {
		maxConns = 16
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	if err := pgMigrateAll(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	drv := riverdatabasesql.New(db)
	return &sqlDB{db: db, d: dialect{
		name: "postgres", numbered: true, saveItems: pgSaveItems,
		isUnique: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505" // unique_violation
		},
		lockOwner: func(ctx context.Context, tx *sql.Tx, owner string) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('sshapi-transfer-owner:' || $1))`, owner)
			return err
		},
		river: drv,
	}}, nil
}

// pgSaveItems runs update for every item in one transaction, the statements queued in one pgx
// batch: sent together and answered together, one round trip for the lot instead of one each.
// Each is still an UPDATE by primary key, so an absent row changes nothing, and an item given
// twice ends in its last state (the statements run in order).
func pgSaveItems(ctx context.Context, db *sql.DB, update, id string, items []*Item) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pgx connection expected, got %T", dc)
		}
		tx, err := sc.Conn().Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		var b pgx.Batch
		for _, it := range items {
			b.Queue(update, itemsUpdateArgs(id, it)...)
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
}

func pgMigrate(ctx context.Context, db *sql.DB) error {
	fsys, err := fs.Sub(migrations, "migrations/postgres")
	if err != nil {
		return fmt.Errorf("transfer db: migrations: %w", err)
	}
	store, err := database.NewStore(database.DialectPostgres, pgMigrationTable)
	if err != nil {
		return fmt.Errorf("transfer db: migrations: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("transfer db: migration lock: %w", err)
	}
	p, err := goose.NewProvider("", db, fsys, goose.WithStore(store), goose.WithDisableGlobalRegistry(true), goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("transfer db: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("transfer db: migrate: %w", err)
	}
	return nil
}

// riverMigrate applies River's own migrations.
func riverMigrate(ctx context.Context, drv riverdriver.Driver[*sql.Tx]) error {
	m, err := rivermigrate.New(drv, nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

// pgMigrateLock is the advisory lock key held while an instance applies migrations, so that
// instances starting at once do not race River's migrator.
const pgMigrateLock = 0x55a91_7e4

// pgMigrateAll applies the transfer tables' and River's migrations under pgMigrateLock.
func pgMigrateAll(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("transfer db: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pgMigrateLock); err != nil {
		return fmt.Errorf("transfer db: migration lock: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, pgMigrateLock) //nolint:errcheck // the session ends with the connection anyway
	if err := pgMigrate(ctx, db); err != nil {
		return err
	}
	if err := riverMigrate(ctx, riverdatabasesql.New(db)); err != nil {
		return fmt.Errorf("transfer db: %w", err)
	}
	return nil
}
