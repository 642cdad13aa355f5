package service

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/postgres"
	"github.com/sshapi/sshapi/internal/store/sqlite"
	"github.com/sshapi/sshapi/internal/transfer"
)

// IsPostgres reports whether a database setting names a PostgreSQL database (a postgres:// or
// postgresql:// URL) rather than a SQLite file.
func IsPostgres(database string) bool {
	return strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://")
}

// OpenDatabases opens (and migrates) the store and the transfer persistence the configuration
// names: both on one PostgreSQL database for a postgres:// URL, otherwise the SQLite files in
// the data directory (the store at cfg.Database if set).
func OpenDatabases(ctx context.Context, cfg config.Config) (store.Store, transfer.Persistence, error) {
	if IsPostgres(cfg.Database) {
		db, err := postgres.Open(ctx, cfg.Database)
		if err != nil {
			return nil, nil, fmt.Errorf("store: %w", err)
		}
		tdb, err := transfer.OpenPostgres(ctx, cfg.Database, cfg.Transfer.DBConns)
		if err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("transfer store: %w", err)
		}
		return db, tdb, nil
	}
	dbPath, tdbPath := sqlitePaths(cfg)
	db, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		return nil, nil, fmt.Errorf("store: %w", err)
	}
	tdb, err := transfer.OpenSQLite(ctx, tdbPath)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("transfer store: %w", err)
	}
	return db, tdb, nil
}

// sqlitePaths are the SQLite files of the store and the transfers when the configuration names
// no PostgreSQL database.
func sqlitePaths(cfg config.Config) (storePath, transfersPath string) {
	storePath = cfg.Database
	if storePath == "" {
		storePath = filepath.Join(cfg.DataDir, DatabaseFile)
	}
	return storePath, filepath.Join(cfg.DataDir, TransfersFile)
}
