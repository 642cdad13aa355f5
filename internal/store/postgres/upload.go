package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sshapi/sshapi/internal/store"
)

const uploadColumns = `id, owner, system_ref, system_owner, system_id, path, dest, part_name, length, committed,
	hash_state, sha256, overwrite, parents, created_at, expires_at`

func scanUpload(row pgx.Row) (*store.Upload, error) {
	var u store.Upload
	err := row.Scan(&u.ID, &u.Owner, &u.SystemRef, &u.SystemOwner, &u.SystemID, &u.Path, &u.Dest, &u.PartName, &u.Length,
		&u.Offset, &u.HashState, &u.SHA256, &u.Overwrite, &u.Parents, &u.CreatedAt, &u.ExpiresAt)
	if err != nil {
		return nil, err
	}
	u.CreatedAt, u.ExpiresAt = u.CreatedAt.UTC(), u.ExpiresAt.UTC()
	return &u, nil
}

// CreateUpload implements store.UploadStore. The owner's bounds are checked under a
// transaction-scoped advisory lock on the owner, so concurrent creates cannot both pass.
func (d *DB) CreateUpload(ctx context.Context, p *store.CreateUploadParams) error {
	u := p.Upload
	if err := store.ValidateKey(u.Owner, u.ID); err != nil {
		return err
	}
	t := now()
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('uploads:' || $1, 0))`, u.Owner); err != nil {
			return fmt.Errorf("postgres: lock owner uploads: %w", err)
		}
		var n, total int64
		err := tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(length), 0)::BIGINT FROM uploads WHERE owner = $1 AND expires_at > $2`,
			u.Owner, p.Now.UTC()).Scan(&n, &total)
		if err != nil {
			return fmt.Errorf("postgres: count uploads: %w", err)
		}
		if p.MaxOpen > 0 && n >= int64(p.MaxOpen) {
			return fmt.Errorf("%w: %d uploads in progress (the limit): finish or delete one first", store.ErrLimit, n)
		}
		if p.MaxBytes > 0 && total+u.Length > p.MaxBytes {
			return fmt.Errorf("%w: uploads in progress reserve %d bytes, %d more would exceed %d", store.ErrLimit, total, u.Length, p.MaxBytes)
		}
		_, err = tx.Exec(ctx, `INSERT INTO uploads (`+uploadColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
			u.ID, u.Owner, u.SystemRef, u.SystemOwner, u.SystemID, u.Path, u.Dest, u.PartName, u.Length, u.Offset,
			nonNilBytes(u.HashState), u.SHA256, u.Overwrite, u.Parents, t, u.ExpiresAt.UTC())
		if isCode(err, uniqueViolation) {
			return fmt.Errorf("upload: %w", store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("postgres: create upload: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	u.CreatedAt = t
	return nil
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// GetUpload implements store.UploadStore.
func (d *DB) GetUpload(ctx context.Context, owner, id string) (*store.Upload, error) {
	u, err := scanUpload(d.pool.QueryRow(ctx, `SELECT `+uploadColumns+` FROM uploads WHERE owner = $1 AND id = $2`, owner, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("upload: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get upload: %w", err)
	}
	return u, nil
}

// LeaseUpload implements store.UploadStore: one conditional UPDATE (the row lock serializes
// two requests; the second sees the first's lease).
func (d *DB) LeaseUpload(ctx context.Context, p *store.LeaseUploadParams) (*store.Upload, error) {
	u, err := scanUpload(d.pool.QueryRow(ctx, `UPDATE uploads SET lease_token = $1, lease_until = $2
		WHERE owner = $3 AND id = $4 AND (lease_token = '' OR lease_token = $1 OR lease_until <= $5) RETURNING `+uploadColumns,
		p.Token, p.Until.UTC(), p.Owner, p.ID, p.Now.UTC()))
	if errors.Is(err, pgx.ErrNoRows) {
		if _, gerr := d.GetUpload(ctx, p.Owner, p.ID); gerr != nil {
			return nil, gerr
		}
		return nil, fmt.Errorf("upload %s: %w", p.ID, store.ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: lease upload: %w", err)
	}
	return u, nil
}

// CommitUpload implements store.UploadStore.
func (d *DB) CommitUpload(ctx context.Context, p *store.LeaseUploadParams) error {
	tag, err := d.pool.Exec(ctx, `UPDATE uploads SET committed = $1, hash_state = $2, lease_until = $3
		WHERE owner = $4 AND id = $5 AND lease_token = $6`, p.Offset, nonNilBytes(p.HashState), p.Until.UTC(), p.Owner, p.ID, p.Token)
	if err != nil {
		return fmt.Errorf("postgres: commit upload: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("upload %s: lease lost: %w", p.ID, store.ErrLocked)
	}
	return nil
}

// ReleaseUpload implements store.UploadStore.
func (d *DB) ReleaseUpload(ctx context.Context, owner, id, token string) error {
	_, err := d.pool.Exec(ctx, `UPDATE uploads SET lease_token = '', lease_until = 'epoch' WHERE owner = $1 AND id = $2 AND lease_token = $3`,
		owner, id, token)
	if err != nil {
		return fmt.Errorf("postgres: release upload: %w", err)
	}
	return nil
}

// DeleteUpload implements store.UploadStore.
func (d *DB) DeleteUpload(ctx context.Context, owner, id string) error {
	if _, err := d.pool.Exec(ctx, `DELETE FROM uploads WHERE owner = $1 AND id = $2`, owner, id); err != nil {
		return fmt.Errorf("postgres: delete upload: %w", err)
	}
	return nil
}

// ExpiredUploads implements store.UploadStore.
func (d *DB) ExpiredUploads(ctx context.Context, at time.Time, limit int) ([]store.Upload, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+uploadColumns+` FROM uploads
		WHERE expires_at <= $1 AND (lease_token = '' OR lease_until <= $1) ORDER BY expires_at LIMIT $2`, at.UTC(), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: expired uploads: %w", err)
	}
	defer rows.Close()
	out := []store.Upload{}
	for rows.Next() {
		u, err := scanUpload(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: expired uploads: %w", err)
		}
		out = append(out, *u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: expired uploads: %w", err)
	}
	return out, nil
}
