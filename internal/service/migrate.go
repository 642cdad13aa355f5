package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sshapi/sshapi/internal/store/postgres"
	"github.com/sshapi/sshapi/internal/store/sqlite"
	"github.com/sshapi/sshapi/internal/transfer"
)

// CopyReport says what CopyDeployment copied.
type CopyReport struct {
	Systems, Credentials, Audit int
	Transfers                   transfer.CopyResult
}

// CopyDeployment copies a single-instance deployment's SQLite store (fromStore, sshapi.db) and
// transfers (fromTransfers, transfers.db; skipped if the file does not exist) into the
// PostgreSQL database at to, which must hold no systems and no transfers yet. Credentials stay
// sealed (the same master keys open them); unfinished transfers are queued again there. Stop
// the old instance first.
func CopyDeployment(ctx context.Context, fromStore, fromTransfers, to string) (CopyReport, error) {
	var rep CopyReport
	if !IsPostgres(to) {
		return rep, errors.New("migrate: --to must be a postgres:// URL")
	}
	if _, err := os.Stat(fromStore); err != nil {
		return rep, fmt.Errorf("migrate: --from: %w", err)
	}
	src, err := sqlite.Open(ctx, fromStore)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	defer src.Close()
	dump, err := src.Dump(ctx)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	dst, err := postgres.Open(ctx, to)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	defer dst.Close()
	if err := dst.Load(ctx, dump); err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	rep.Systems, rep.Credentials, rep.Audit = len(dump.Systems), len(dump.Credentials), len(dump.Audit)
	if fromTransfers == "" {
		fromTransfers = filepath.Join(filepath.Dir(fromStore), TransfersFile)
	}
	if _, err := os.Stat(fromTransfers); errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	tsrc, err := transfer.OpenSQLite(ctx, fromTransfers)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	defer tsrc.Close()
	tdst, err := transfer.OpenPostgres(ctx, to, 4)
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	defer tdst.Close()
	if rep.Transfers, err = transfer.CopyTransfers(ctx, tsrc, tdst); err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	return rep, nil
}
