package store

import (
	"context"
	"fmt"
	"time"
)

// SQLUploads implements UploadStore once for every driver over a Querier. The table is uploads
// (migration 0006 of each driver; PostgreSQL's times became Unix microseconds in its 0008).
type SQLUploads struct {
	// Q runs the queries.
	Q Querier
}

var _ UploadStore = SQLUploads{}

const uploadColumns = `id, owner, system_ref, system_owner, system_id, path, dest, part_name, length, committed,
	hash_state, sha256, overwrite, parents, created_at, expires_at`

// scanUpload reads one row of uploadColumns.
func scanUpload(scan func(...any) error) (*Upload, error) {
	var u Upload
	var created, expires int64
	err := scan(&u.ID, &u.Owner, &u.SystemRef, &u.SystemOwner, &u.SystemID, &u.Path, &u.Dest, &u.PartName, &u.Length,
		&u.Offset, &u.HashState, &u.SHA256, &u.Overwrite, &u.Parents, &created, &expires)
	if err != nil {
		return nil, err
	}
	u.CreatedAt, u.ExpiresAt = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC()
	return &u, nil
}

// queryUploads runs a query returning uploadColumns.
func (s SQLUploads) queryUploads(ctx context.Context, q Querier, query string, args ...any) ([]Upload, error) {
	out := []Upload{}
	err := q.Query(ctx, query, args, func(scan func(...any) error) error {
		u, err := scanUpload(scan)
		if err != nil {
			return err
		}
		out = append(out, *u)
		return nil
	})
	return out, err
}

// CreateUpload implements UploadStore. The owner's bounds are checked in the transaction that
// inserts, under a lock on the owner (Querier.LockKey), so concurrent creates cannot both pass.
func (s SQLUploads) CreateUpload(ctx context.Context, p *CreateUploadParams) error {
	u := p.Upload
	if err := ValidateKey(u.Owner, u.ID); err != nil {
		return err
	}
	t := time.Now().UTC().Truncate(time.Microsecond)
	err := s.Q.InTx(ctx, func(q Querier) error {
		if err := q.LockKey(ctx, "uploads:"+u.Owner); err != nil {
			return fmt.Errorf("lock owner uploads: %w", err)
		}
		var n, total int64
		err := q.Query(ctx, `SELECT count(*), CAST(coalesce(sum(length), 0) AS BIGINT) FROM uploads WHERE owner = ? AND expires_at > ?`,
			[]any{u.Owner, p.Now.UnixMicro()}, func(scan func(...any) error) error { return scan(&n, &total) })
		if err != nil {
			return fmt.Errorf("count uploads: %w", err)
		}
		if p.MaxOpen > 0 && n >= int64(p.MaxOpen) {
			return fmt.Errorf("%w: %d uploads in progress (the limit): finish or delete one first", ErrLimit, n)
		}
		if p.MaxBytes > 0 && total+u.Length > p.MaxBytes {
			return fmt.Errorf("%w: uploads in progress reserve %d bytes, %d more would exceed %d", ErrLimit, total, u.Length, p.MaxBytes)
		}
		hash := u.HashState
		if hash == nil {
			hash = []byte{}
		}
		_, err = q.Exec(ctx, `INSERT INTO uploads (`+uploadColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			u.ID, u.Owner, u.SystemRef, u.SystemOwner, u.SystemID, u.Path, u.Dest, u.PartName, u.Length, u.Offset,
			hash, u.SHA256, u.Overwrite, u.Parents, t.UnixMicro(), u.ExpiresAt.UnixMicro())
		if q.IsConflict(err) {
			return fmt.Errorf("upload: %w", ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create upload: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	u.CreatedAt = t
	return nil
}

// GetUpload implements UploadStore.
func (s SQLUploads) GetUpload(ctx context.Context, owner, id string) (*Upload, error) {
	ups, err := s.queryUploads(ctx, s.Q, `SELECT `+uploadColumns+` FROM uploads WHERE owner = ? AND id = ?`, owner, id)
	if err != nil {
		return nil, fmt.Errorf("get upload: %w", err)
	}
	if len(ups) == 0 {
		return nil, fmt.Errorf("upload: %w", ErrNotFound)
	}
	return &ups[0], nil
}

// LeaseUpload implements UploadStore: one conditional UPDATE, so two requests never both take
// the lease (PostgreSQL's row lock makes the second see the first's lease; SQLite has one
// writer).
func (s SQLUploads) LeaseUpload(ctx context.Context, p *LeaseUploadParams) (*Upload, error) {
	ups, err := s.queryUploads(ctx, s.Q, `UPDATE uploads SET lease_token = ?, lease_until = ?
		WHERE owner = ? AND id = ? AND (lease_token = '' OR lease_token = ? OR lease_until <= ?) RETURNING `+uploadColumns,
		p.Token, p.Until.UnixMicro(), p.Owner, p.ID, p.Token, p.Now.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("lease upload: %w", err)
	}
	if len(ups) == 0 {
		if _, gerr := s.GetUpload(ctx, p.Owner, p.ID); gerr != nil {
			return nil, gerr
		}
		return nil, fmt.Errorf("upload %s: %w", p.ID, ErrLocked)
	}
	return &ups[0], nil
}

// CommitUpload implements UploadStore.
func (s SQLUploads) CommitUpload(ctx context.Context, p *LeaseUploadParams) error {
	hash := p.HashState
	if hash == nil {
		hash = []byte{}
	}
	n, err := s.Q.Exec(ctx, `UPDATE uploads SET committed = ?, hash_state = ?, lease_until = ?
		WHERE owner = ? AND id = ? AND lease_token = ?`, p.Offset, hash, p.Until.UnixMicro(), p.Owner, p.ID, p.Token)
	if err != nil {
		return fmt.Errorf("commit upload: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("upload %s: lease lost: %w", p.ID, ErrLocked)
	}
	return nil
}

// RenewUpload implements UploadStore.
func (s SQLUploads) RenewUpload(ctx context.Context, p *LeaseUploadParams) error {
	n, err := s.Q.Exec(ctx, `UPDATE uploads SET lease_until = ? WHERE owner = ? AND id = ? AND lease_token = ?`,
		p.Until.UnixMicro(), p.Owner, p.ID, p.Token)
	if err != nil {
		return fmt.Errorf("renew upload lease: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("upload %s: lease lost: %w", p.ID, ErrLocked)
	}
	return nil
}

// ReleaseUpload implements UploadStore.
func (s SQLUploads) ReleaseUpload(ctx context.Context, owner, id, token string) error {
	if _, err := s.Q.Exec(ctx, `UPDATE uploads SET lease_token = '', lease_until = 0 WHERE owner = ? AND id = ? AND lease_token = ?`,
		owner, id, token); err != nil {
		return fmt.Errorf("release upload: %w", err)
	}
	return nil
}

// DeleteUpload implements UploadStore.
func (s SQLUploads) DeleteUpload(ctx context.Context, owner, id string) error {
	if _, err := s.Q.Exec(ctx, `DELETE FROM uploads WHERE owner = ? AND id = ?`, owner, id); err != nil {
		return fmt.Errorf("delete upload: %w", err)
	}
	return nil
}

// ExpiredUploads implements UploadStore.
func (s SQLUploads) ExpiredUploads(ctx context.Context, at time.Time, limit int) ([]Upload, error) {
	ups, err := s.queryUploads(ctx, s.Q, `SELECT `+uploadColumns+` FROM uploads
		WHERE expires_at <= ? AND (lease_token = '' OR lease_until <= ?) ORDER BY lease_until, expires_at LIMIT ?`, at.UnixMicro(), at.UnixMicro(), limit)
	if err != nil {
		return nil, fmt.Errorf("expired uploads: %w", err)
	}
	return ups, nil
}
