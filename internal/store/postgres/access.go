package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sshapi/sshapi/internal/store"
)

// where builds a WHERE clause with numbered placeholders.
type where struct {
	conds []string
	args  []any
}

// add appends cond, whose "?"s become the next placeholders, bound to a.
func (w *where) add(cond string, a ...any) {
	for range a {
		n := "$" + strconv.Itoa(len(w.args)+1)
		cond = strings.Replace(cond, "?", n, 1)
		w.args = append(w.args, a[0])
		a = a[1:]
	}
	w.conds = append(w.conds, cond)
}

func (w *where) sql() string {
	if len(w.conds) == 0 {
		return "true"
	}
	return strings.Join(w.conds, " AND ")
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// CreateGrant implements store.AccessStore.
func (d *DB) CreateGrant(ctx context.Context, p *store.GrantCreateParams) error {
	g := p.Grant
	if err := store.ValidateKey(g.Owner, g.SystemID); err != nil {
		return err
	}
	g.ID, g.CreatedAt = "g_"+rand.Text(), now()
	g.ExpiresAt = g.ExpiresAt.UTC().Truncate(time.Microsecond)
	return d.withRoom(ctx, "grants", g.Owner, g.SystemID, p.Max, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO grants (id, owner, system_id, principal, path, access, expires_at, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			g.ID, g.Owner, g.SystemID, g.Principal, g.Path, g.Access, nullTime(g.ExpiresAt), g.CreatedAt); err != nil {
			return fmt.Errorf("postgres: create grant: %w", err)
		}
		return nil
	})
}

// withRoom runs insert in a transaction once owner's system id is known to exist (else
// ErrNotFound) and, when max > 0, to have fewer than max rows in table ("grants" or "links";
// else a *store.LimitError). It locks the system's row first (FOR NO KEY UPDATE: creators of
// one system queue, on every instance sharing the database, while foreign-key checks of other
// writes still pass), and counts after the lock, under READ COMMITTED, so the count includes
// every create that held the lock before; it stays true until insert commits.
func (d *DB) withRoom(ctx context.Context, table, owner, id string, max int, insert func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM systems WHERE owner = $1 AND id = $2 FOR NO KEY UPDATE`, owner, id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("system %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres: lock system: %w", err)
		}
		if max > 0 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE owner = $1 AND system_id = $2`, owner, id).Scan(&n); err != nil {
				return fmt.Errorf("postgres: count %s: %w", table, err)
			}
			if n >= max {
				return &store.LimitError{SystemID: id, What: table, Max: max}
			}
		}
		return insert(tx)
	})
}

// ListGrants implements store.AccessStore.
func (d *DB) ListGrants(ctx context.Context, p *store.GrantListParams) ([]store.Grant, error) {
	var w where
	if p.SystemID != "" {
		w.add("owner = ? AND system_id = ?", p.Owner, p.SystemID)
	} else {
		if len(p.Principals) == 0 {
			return []store.Grant{}, nil
		}
		w.add("principal = ANY(?)", p.Principals)
		if p.Owner != "" {
			w.add("owner = ?", p.Owner)
		}
	}
	if !p.Now.IsZero() {
		w.add("(expires_at IS NULL OR expires_at > ?)", p.Now)
	}
	rows, err := d.pool.Query(ctx, `SELECT id, owner, system_id, principal, path, access, expires_at, created_at
		FROM grants WHERE `+w.sql()+` ORDER BY created_at, id`, w.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list grants: %w", err)
	}
	defer rows.Close()
	out := []store.Grant{}
	for rows.Next() {
		var (
			g   store.Grant
			exp *time.Time
		)
		if err := rows.Scan(&g.ID, &g.Owner, &g.SystemID, &g.Principal, &g.Path, &g.Access, &exp, &g.CreatedAt); err != nil {
			return nil, fmt.Errorf("postgres: list grants: %w", err)
		}
		if exp != nil {
			g.ExpiresAt = exp.UTC()
		}
		g.CreatedAt = g.CreatedAt.UTC()
		out = append(out, g)
	}
	return out, rows.Err()
}

// DeleteGrant implements store.AccessStore.
func (d *DB) DeleteGrant(ctx context.Context, p *store.GrantDeleteParams) error {
	tag, err := d.pool.Exec(ctx, `DELETE FROM grants WHERE owner = $1 AND system_id = $2 AND id = $3`, p.Owner, p.SystemID, p.ID)
	if err != nil {
		return fmt.Errorf("postgres: delete grant: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("grant %q: %w", p.ID, store.ErrNotFound)
	}
	return nil
}

const linkColumns = `id, owner, system_id, path, access, secret_hash, expires_at, max_uses, uses, created_at`

func scanLink(r pgx.Row) (*store.Link, error) {
	var l store.Link
	if err := r.Scan(&l.ID, &l.Owner, &l.SystemID, &l.Path, &l.Access, &l.SecretHash, &l.ExpiresAt, &l.MaxUses, &l.Uses, &l.CreatedAt); err != nil {
		return nil, err
	}
	l.ExpiresAt, l.CreatedAt = l.ExpiresAt.UTC(), l.CreatedAt.UTC()
	return &l, nil
}

// CreateLink implements store.AccessStore.
func (d *DB) CreateLink(ctx context.Context, p *store.LinkCreateParams) error {
	l := p.Link
	if err := store.ValidateKey(l.Owner, l.SystemID); err != nil {
		return err
	}
	if l.ID == "" {
		return fmt.Errorf("%w: empty link id", store.ErrInvalid)
	}
	l.CreatedAt = now()
	l.ExpiresAt = l.ExpiresAt.UTC().Truncate(time.Microsecond)
	return d.withRoom(ctx, "links", l.Owner, l.SystemID, p.Max, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO links (`+linkColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9)`,
			l.ID, l.Owner, l.SystemID, l.Path, l.Access, nonNil(l.SecretHash), l.ExpiresAt, l.MaxUses, l.CreatedAt)
		if isCode(err, uniqueViolation) {
			return fmt.Errorf("link %q: %w", l.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("postgres: create link: %w", err)
		}
		return nil
	})
}

// GetLink implements store.AccessStore.
func (d *DB) GetLink(ctx context.Context, p *store.LinkGetParams) (*store.Link, error) {
	l, err := scanLink(d.pool.QueryRow(ctx, `SELECT `+linkColumns+` FROM links WHERE id = $1`, p.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("link: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get link: %w", err)
	}
	return l, nil
}

// ListLinks implements store.AccessStore.
func (d *DB) ListLinks(ctx context.Context, p *store.LinkListParams) ([]store.Link, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+linkColumns+` FROM links WHERE owner = $1 AND system_id = $2 ORDER BY created_at, id`, p.Owner, p.SystemID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list links: %w", err)
	}
	defer rows.Close()
	out := []store.Link{}
	for rows.Next() {
		l, err := scanLink(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: list links: %w", err)
		}
		out = append(out, *l)
	}
	return out, rows.Err()
}

// DeleteLink implements store.AccessStore.
func (d *DB) DeleteLink(ctx context.Context, p *store.LinkDeleteParams) error {
	tag, err := d.pool.Exec(ctx, `DELETE FROM links WHERE owner = $1 AND system_id = $2 AND id = $3`, p.Owner, p.SystemID, p.ID)
	if err != nil {
		return fmt.Errorf("postgres: delete link: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("link %q: %w", p.ID, store.ErrNotFound)
	}
	return nil
}

// UseLink implements store.AccessStore.
func (d *DB) UseLink(ctx context.Context, p *store.LinkUseParams) (*store.Link, error) {
	l, err := scanLink(d.pool.QueryRow(ctx, `UPDATE links SET uses = uses + 1
		WHERE id = $1 AND expires_at > $2 AND (max_uses = 0 OR uses < max_uses)
		RETURNING `+linkColumns, p.ID, p.Now))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("link: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: use link: %w", err)
	}
	return l, nil
}

// QueryAudit implements store.AccessStore.
func (d *DB) QueryAudit(ctx context.Context, p *store.AuditQueryParams) ([]store.AuditEntry, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultAuditLimit
	}
	var w where
	if p.Visible != "" {
		w.add("(owner = ? OR system_owner = ?)", p.Visible, p.Visible)
	}
	if p.Principal != "" {
		w.add("owner = ?", p.Principal)
	}
	if p.SystemOwner != "" {
		w.add("(system_owner = ? OR (system_owner = '' AND owner = ?))", p.SystemOwner, p.SystemOwner)
	}
	if p.System != "" {
		w.add("system_id = ?", p.System)
	}
	if p.PathPrefix != "" {
		w.add("EXISTS (SELECT 1 FROM unnest(paths) AS x WHERE left(x, length(?)) = ?)", p.PathPrefix, p.PathPrefix)
	}
	if !p.Since.IsZero() {
		w.add("time >= ?", p.Since)
	}
	if !p.Until.IsZero() {
		w.add("time < ?", p.Until)
	}
	if p.BeforeSeq > 0 {
		w.add("seq < ?", p.BeforeSeq)
	}
	args := append(w.args, limit)
	rows, err := d.pool.Query(ctx, `SELECT seq, time, owner, action, system_id, detail, system_owner, paths, status, bytes, request_id, link_id
		FROM audit_log WHERE `+w.sql()+` ORDER BY seq DESC LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: query audit: %w", err)
	}
	defer rows.Close()
	out := []store.AuditEntry{}
	for rows.Next() {
		var e store.AuditEntry
		if err := rows.Scan(&e.Seq, &e.Time, &e.Owner, &e.Action, &e.SystemID, &e.Detail, &e.SystemOwner, &e.Paths, &e.Status, &e.Bytes, &e.RequestID, &e.LinkID); err != nil {
			return nil, fmt.Errorf("postgres: query audit: %w", err)
		}
		e.Time = e.Time.UTC()
		if len(e.Paths) == 0 {
			e.Paths = nil
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// PurgeAudit implements store.AccessStore.
func (d *DB) PurgeAudit(ctx context.Context, p *store.AuditPurgeParams) (int64, error) {
	tag, err := d.pool.Exec(ctx, `DELETE FROM audit_log WHERE time < $1`, p.Before)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge audit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// SetDisabled implements store.AccessStore.
func (d *DB) SetDisabled(ctx context.Context, p *store.DisabledParams) error {
	if p.Owner == "" {
		return fmt.Errorf("%w: empty owner", store.ErrInvalid)
	}
	q := `DELETE FROM disabled WHERE owner = $1 AND system_id = $2`
	if p.Disabled {
		q = `INSERT INTO disabled (owner, system_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	}
	if _, err := d.pool.Exec(ctx, q, p.Owner, p.SystemID); err != nil {
		return fmt.Errorf("postgres: set disabled: %w", err)
	}
	return nil
}

// IsDisabled implements store.AccessStore.
func (d *DB) IsDisabled(ctx context.Context, p *store.DisabledParams) (bool, error) {
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM disabled WHERE owner = $1 AND system_id IN ('', $2)`, p.Owner, p.SystemID).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("postgres: is disabled: %w", err)
	}
	return n > 0, nil
}

// AccessStamp implements store.AccessStore.
func (d *DB) AccessStamp(ctx context.Context, p *store.AccessStampParams) (store.AccessStamp, error) {
	var st store.AccessStamp
	var updated *time.Time
	var grants, disabled int
	err := d.pool.QueryRow(ctx, `SELECT
		(SELECT updated_at FROM systems WHERE owner = $1 AND id = $2),
		COALESCE((SELECT generation FROM credentials WHERE owner = $1 AND system_id = $2), 0),
		(SELECT count(*) FROM grants WHERE id = $3 AND owner = $1 AND system_id = $2 AND (expires_at IS NULL OR expires_at > $4)),
		(SELECT count(*) FROM disabled WHERE (owner = $5 AND system_id = '') OR (owner = $1 AND system_id IN ('', $2))),
		COALESCE((SELECT array_to_json(groups)::text FROM user_groups WHERE username = $5), '')`,
		p.Owner, p.SystemID, p.GrantID, p.Now, p.Caller).Scan(&updated, &st.CredentialGeneration, &grants, &disabled, &st.CallerGroups)
	if err != nil {
		return store.AccessStamp{}, fmt.Errorf("postgres: access stamp: %w", err)
	}
	if updated != nil {
		st.SystemUpdated = updated.UnixMicro()
	}
	st.GrantLive, st.Disabled = grants > 0, disabled > 0
	return st, nil
}

// ListAllSystems implements store.AccessStore.
func (d *DB) ListAllSystems(ctx context.Context) ([]store.System, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+systemColumns+` FROM systems ORDER BY owner COLLATE "C", id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list all systems: %w", err)
	}
	defer rows.Close()
	out := []store.System{}
	for rows.Next() {
		s, err := scanSystem(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: list all systems: %w", err)
		}
		out = append(out, *s)
	}
	return out, rows.Err()
}

// PutUserGroups implements store.AccessStore.
func (d *DB) PutUserGroups(ctx context.Context, p *store.UserGroupsParams) error {
	if p.User == "" {
		return fmt.Errorf("%w: empty user", store.ErrInvalid)
	}
	if _, err := d.pool.Exec(ctx, `INSERT INTO user_groups (username, groups) VALUES ($1, $2)
		ON CONFLICT (username) DO UPDATE SET groups = excluded.groups`, p.User, nonNilStrings(p.Groups)); err != nil {
		return fmt.Errorf("postgres: put user groups: %w", err)
	}
	return nil
}

// GetUserGroups implements store.AccessStore.
func (d *DB) GetUserGroups(ctx context.Context, p *store.UserGroupsParams) ([]string, error) {
	var g []string
	err := d.pool.QueryRow(ctx, `SELECT groups FROM user_groups WHERE username = $1`, p.User).Scan(&g)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get user groups: %w", err)
	}
	if len(g) == 0 {
		return nil, nil
	}
	return g, nil
}
