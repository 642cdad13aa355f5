package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sshapi/sshapi/internal/store"
)

// CreateSession implements store.SessionStore.
func (d *DB) CreateSession(ctx context.Context, p *store.SessionParams) error {
	s := p.Session
	t := now()
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ui_sessions (id_hash, user_id, groups, created_at, last_seen_at, expires_at)
			VALUES ($1, $2, $3, $4, $4, $5)`, s.IDHash, s.User, nonNilStrings(s.Groups), t, s.ExpiresAt.UTC())
		if isCode(err, uniqueViolation) {
			return fmt.Errorf("session: %w", store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("postgres: create session: %w", err)
		}
		if p.MaxPerUser > 0 {
			_, err = tx.Exec(ctx, `DELETE FROM ui_sessions WHERE user_id = $1 AND id_hash NOT IN
				(SELECT id_hash FROM ui_sessions WHERE user_id = $1 ORDER BY created_at DESC, id_hash = $2 DESC LIMIT $3)`,
				s.User, s.IDHash, p.MaxPerUser)
			if err != nil {
				return fmt.Errorf("postgres: trim sessions: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.CreatedAt, s.LastSeenAt = t, t
	return nil
}

// GetSession implements store.SessionStore.
func (d *DB) GetSession(ctx context.Context, idHash []byte, at, idleSince time.Time) (*store.Session, error) {
	var s store.Session
	err := d.pool.QueryRow(ctx, `SELECT id_hash, user_id, groups, created_at, last_seen_at, expires_at FROM ui_sessions
		WHERE id_hash = $1 AND expires_at > $2 AND last_seen_at > $3`, idHash, at.UTC(), idleSince.UTC()).
		Scan(&s.IDHash, &s.User, &s.Groups, &s.CreatedAt, &s.LastSeenAt, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get session: %w", err)
	}
	s.CreatedAt, s.LastSeenAt, s.ExpiresAt = s.CreatedAt.UTC(), s.LastSeenAt.UTC(), s.ExpiresAt.UTC()
	return &s, nil
}

// TouchSession implements store.SessionStore.
func (d *DB) TouchSession(ctx context.Context, idHash []byte, at time.Time) error {
	_, err := d.pool.Exec(ctx, `UPDATE ui_sessions SET last_seen_at = $2 WHERE id_hash = $1 AND last_seen_at < $2`, idHash, at.UTC())
	if err != nil {
		return fmt.Errorf("postgres: touch session: %w", err)
	}
	return nil
}

// DeleteSession implements store.SessionStore.
func (d *DB) DeleteSession(ctx context.Context, idHash []byte) error {
	if _, err := d.pool.Exec(ctx, `DELETE FROM ui_sessions WHERE id_hash = $1`, idHash); err != nil {
		return fmt.Errorf("postgres: delete session: %w", err)
	}
	return nil
}

// DeleteUserSessions implements store.SessionStore.
func (d *DB) DeleteUserSessions(ctx context.Context, user string) (int64, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM ui_sessions WHERE user_id = $1`, user)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DeleteExpiredSessions implements store.SessionStore.
func (d *DB) DeleteExpiredSessions(ctx context.Context, at, idleSince time.Time) (int64, error) {
	a, err := d.pool.Exec(ctx, `DELETE FROM ui_sessions WHERE expires_at <= $1 OR last_seen_at <= $2`, at.UTC(), idleSince.UTC())
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired sessions: %w", err)
	}
	b, err := d.pool.Exec(ctx, `DELETE FROM ui_login_flows WHERE expires_at <= $1`, at.UTC())
	if err != nil {
		return a.RowsAffected(), fmt.Errorf("postgres: delete expired login flows: %w", err)
	}
	return a.RowsAffected() + b.RowsAffected(), nil
}

// CreateLoginFlow implements store.SessionStore.
func (d *DB) CreateLoginFlow(ctx context.Context, f *store.LoginFlow) error {
	_, err := d.pool.Exec(ctx, `INSERT INTO ui_login_flows (key_hash, kind, user_id, data, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		f.KeyHash, f.Kind, f.User, nonNil(f.Data), f.ExpiresAt.UTC())
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("login flow: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("postgres: create login flow: %w", err)
	}
	return nil
}

// TakeLoginFlow implements store.SessionStore.
func (d *DB) TakeLoginFlow(ctx context.Context, keyHash []byte, kind string, at time.Time) (*store.LoginFlow, error) {
	var f store.LoginFlow
	err := d.pool.QueryRow(ctx, `DELETE FROM ui_login_flows WHERE key_hash = $1 AND kind = $2
		RETURNING key_hash, kind, user_id, data, expires_at`, keyHash, kind).
		Scan(&f.KeyHash, &f.Kind, &f.User, &f.Data, &f.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("login flow: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: take login flow: %w", err)
	}
	f.ExpiresAt = f.ExpiresAt.UTC()
	if !f.ExpiresAt.After(at) {
		return nil, fmt.Errorf("login flow expired: %w", store.ErrNotFound)
	}
	return &f, nil
}
