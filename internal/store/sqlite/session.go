package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sshapi/sshapi/internal/store"
)

// CreateSession implements store.SessionStore.
func (d *DB) CreateSession(ctx context.Context, p *store.SessionParams) error {
	s := p.Session
	groups, err := json.Marshal(nonNilStrings(s.Groups))
	if err != nil {
		return fmt.Errorf("sqlite: encode groups: %w", err)
	}
	t := now()
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO ui_sessions (id_hash, user_id, groups, created_at, last_seen_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?)`, s.IDHash, s.User, string(groups), t.UnixMicro(), t.UnixMicro(), s.ExpiresAt.UnixMicro())
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return fmt.Errorf("session: %w", store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create session: %w", err)
		}
		if p.MaxPerUser > 0 {
			_, err = tx.ExecContext(ctx, `DELETE FROM ui_sessions WHERE user_id = ? AND id_hash NOT IN
				(SELECT id_hash FROM ui_sessions WHERE user_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?)`,
				s.User, s.User, p.MaxPerUser)
			if err != nil {
				return fmt.Errorf("sqlite: trim sessions: %w", err)
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
	var groups string
	var created, seen, expires int64
	err := d.db.QueryRowContext(ctx, `SELECT id_hash, user_id, groups, created_at, last_seen_at, expires_at FROM ui_sessions
		WHERE id_hash = ? AND expires_at > ? AND last_seen_at > ?`, idHash, at.UnixMicro(), idleSince.UnixMicro()).
		Scan(&s.IDHash, &s.User, &groups, &created, &seen, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get session: %w", err)
	}
	if err := json.Unmarshal([]byte(groups), &s.Groups); err != nil {
		return nil, fmt.Errorf("sqlite: session groups: %w", err)
	}
	s.CreatedAt, s.LastSeenAt, s.ExpiresAt = fromMicros(created), fromMicros(seen), fromMicros(expires)
	return &s, nil
}

// TouchSession implements store.SessionStore.
func (d *DB) TouchSession(ctx context.Context, idHash []byte, at time.Time) error {
	_, err := d.db.ExecContext(ctx, `UPDATE ui_sessions SET last_seen_at = ? WHERE id_hash = ? AND last_seen_at < ?`,
		at.UnixMicro(), idHash, at.UnixMicro())
	if err != nil {
		return fmt.Errorf("sqlite: touch session: %w", err)
	}
	return nil
}

// DeleteSession implements store.SessionStore.
func (d *DB) DeleteSession(ctx context.Context, idHash []byte) error {
	if _, err := d.db.ExecContext(ctx, `DELETE FROM ui_sessions WHERE id_hash = ?`, idHash); err != nil {
		return fmt.Errorf("sqlite: delete session: %w", err)
	}
	return nil
}

// DeleteUserSessions implements store.SessionStore.
func (d *DB) DeleteUserSessions(ctx context.Context, user string) (int64, error) {
	res, err := d.db.ExecContext(ctx, `DELETE FROM ui_sessions WHERE user_id = ?`, user)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete sessions: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// DeleteExpiredSessions implements store.SessionStore.
func (d *DB) DeleteExpiredSessions(ctx context.Context, at, idleSince time.Time) (int64, error) {
	var total int64
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM ui_sessions WHERE expires_at <= ? OR last_seen_at <= ?`, at.UnixMicro(), idleSince.UnixMicro())
		if err != nil {
			return fmt.Errorf("sqlite: delete expired sessions: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		res, err = tx.ExecContext(ctx, `DELETE FROM ui_login_flows WHERE expires_at <= ?`, at.UnixMicro())
		if err != nil {
			return fmt.Errorf("sqlite: delete expired login flows: %w", err)
		}
		n, _ = res.RowsAffected()
		total += n
		return nil
	})
	return total, err
}

// CreateLoginFlow implements store.SessionStore.
func (d *DB) CreateLoginFlow(ctx context.Context, f *store.LoginFlow) error {
	_, err := d.db.ExecContext(ctx, `INSERT INTO ui_login_flows (key_hash, kind, user_id, data, expires_at) VALUES (?, ?, ?, ?, ?)`,
		f.KeyHash, f.Kind, f.User, nonNil(f.Data), f.ExpiresAt.UnixMicro())
	if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("login flow: %w", store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlite: create login flow: %w", err)
	}
	return nil
}

// TakeLoginFlow implements store.SessionStore.
func (d *DB) TakeLoginFlow(ctx context.Context, keyHash []byte, kind string, at time.Time) (*store.LoginFlow, error) {
	var f store.LoginFlow
	var expires int64
	err := d.db.QueryRowContext(ctx, `DELETE FROM ui_login_flows WHERE key_hash = ? AND kind = ?
		RETURNING key_hash, kind, user_id, data, expires_at`, keyHash, kind).
		Scan(&f.KeyHash, &f.Kind, &f.User, &f.Data, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("login flow: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: take login flow: %w", err)
	}
	f.ExpiresAt = fromMicros(expires)
	if !f.ExpiresAt.After(at) {
		return nil, fmt.Errorf("login flow expired: %w", store.ErrNotFound)
	}
	return &f, nil
}
