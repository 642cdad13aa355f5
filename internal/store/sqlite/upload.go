package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sshapi/sshapi/internal/store"
)

const uploadColumns = `id, owner, system_ref, system_owner, system_id, path, dest, part_name, length, committed,
	hash_state, sha256, overwrite, parents, created_at, expires_at`

func scanUpload(row interface{ Scan(...any) error }) (*store.Upload, error) {
	var u store.Upload
	var created, expires int64
	err := row.Scan(&u.ID, &u.Owner, &u.SystemRef, &u.SystemOwner, &u.SystemID, &u.Path, &u.Dest, &u.PartName, &u.Length,
		&u.Offset, &u.HashState, &u.SHA256, &u.Overwrite, &u.Parents, &created, &expires)
	if err != nil {
		return nil, err
	}
	u.CreatedAt, u.ExpiresAt = fromMicros(created), fromMicros(expires)
	return &u, nil
}

// CreateUpload implements store.UploadStore.
func (d *DB) CreateUpload(ctx context.Context, p *store.CreateUploadParams) error {
	u := p.Upload
	if err := store.ValidateKey(u.Owner, u.ID); err != nil {
		return err
	}
	t := now()
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var n, total int64
		err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(length), 0) FROM uploads WHERE owner = ? AND expires_at > ?`,
			u.Owner, p.Now.UnixMicro()).Scan(&n, &total)
		if err != nil {
			return fmt.Errorf("sqlite: count uploads: %w", err)
		}
		if err := uploadLimit(n, total, u.Length, p); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO uploads (`+uploadColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			u.ID, u.Owner, u.SystemRef, u.SystemOwner, u.SystemID, u.Path, u.Dest, u.PartName, u.Length, u.Offset,
			nonNil(u.HashState), u.SHA256, u.Overwrite, u.Parents, t.UnixMicro(), u.ExpiresAt.UnixMicro())
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return fmt.Errorf("upload: %w", store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create upload: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	u.CreatedAt = t
	return nil
}

// uploadLimit applies CreateUploadParams' bounds to an owner with n open uploads of total bytes.
func uploadLimit(n, total, length int64, p *store.CreateUploadParams) error {
	if p.MaxOpen > 0 && n >= int64(p.MaxOpen) {
		return fmt.Errorf("%w: %d uploads in progress (the limit): finish or delete one first", store.ErrLimit, n)
	}
	if p.MaxBytes > 0 && total+length > p.MaxBytes {
		return fmt.Errorf("%w: uploads in progress reserve %d bytes, %d more would exceed %d", store.ErrLimit, total, length, p.MaxBytes)
	}
	return nil
}

// GetUpload implements store.UploadStore.
func (d *DB) GetUpload(ctx context.Context, owner, id string) (*store.Upload, error) {
	u, err := scanUpload(d.db.QueryRowContext(ctx, `SELECT `+uploadColumns+` FROM uploads WHERE owner = ? AND id = ?`, owner, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("upload: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get upload: %w", err)
	}
	return u, nil
}

// LeaseUpload implements store.UploadStore: one conditional UPDATE, so two requests never both
// take the lease.
func (d *DB) LeaseUpload(ctx context.Context, p *store.LeaseUploadParams) (*store.Upload, error) {
	u, err := scanUpload(d.db.QueryRowContext(ctx, `UPDATE uploads SET lease_token = ?, lease_until = ?
		WHERE owner = ? AND id = ? AND (lease_token = '' OR lease_token = ? OR lease_until <= ?) RETURNING `+uploadColumns,
		p.Token, p.Until.UnixMicro(), p.Owner, p.ID, p.Token, p.Now.UnixMicro()))
	if errors.Is(err, sql.ErrNoRows) {
		if _, gerr := d.GetUpload(ctx, p.Owner, p.ID); gerr != nil {
			return nil, gerr
		}
		return nil, fmt.Errorf("upload %s: %w", p.ID, store.ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: lease upload: %w", err)
	}
	return u, nil
}

// CommitUpload implements store.UploadStore.
func (d *DB) CommitUpload(ctx context.Context, p *store.LeaseUploadParams) error {
	res, err := d.db.ExecContext(ctx, `UPDATE uploads SET committed = ?, hash_state = ?, lease_until = ?
		WHERE owner = ? AND id = ? AND lease_token = ?`, p.Offset, nonNil(p.HashState), p.Until.UnixMicro(), p.Owner, p.ID, p.Token)
	if err != nil {
		return fmt.Errorf("sqlite: commit upload: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("upload %s: lease lost: %w", p.ID, store.ErrLocked)
	}
	return nil
}

// ReleaseUpload implements store.UploadStore.
func (d *DB) ReleaseUpload(ctx context.Context, owner, id, token string) error {
	_, err := d.db.ExecContext(ctx, `UPDATE uploads SET lease_token = '', lease_until = 0 WHERE owner = ? AND id = ? AND lease_token = ?`,
		owner, id, token)
	if err != nil {
		return fmt.Errorf("sqlite: release upload: %w", err)
	}
	return nil
}

// DeleteUpload implements store.UploadStore.
func (d *DB) DeleteUpload(ctx context.Context, owner, id string) error {
	if _, err := d.db.ExecContext(ctx, `DELETE FROM uploads WHERE owner = ? AND id = ?`, owner, id); err != nil {
		return fmt.Errorf("sqlite: delete upload: %w", err)
	}
	return nil
}

// ExpiredUploads implements store.UploadStore.
func (d *DB) ExpiredUploads(ctx context.Context, at time.Time, limit int) ([]store.Upload, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+uploadColumns+` FROM uploads
		WHERE expires_at <= ? AND (lease_token = '' OR lease_until <= ?) ORDER BY expires_at LIMIT ?`, at.UnixMicro(), at.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: expired uploads: %w", err)
	}
	defer rows.Close()
	out := []store.Upload{}
	for rows.Next() {
		u, err := scanUpload(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: expired uploads: %w", err)
		}
		out = append(out, *u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: expired uploads: %w", err)
	}
	return out, nil
}
