package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sshapi/sshapi/internal/store"
)

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicrosOrZero(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return fromMicros(us)
}

// CreateGrant implements store.AccessStore.
func (d *DB) CreateGrant(ctx context.Context, p *store.GrantCreateParams) error {
	g := p.Grant
	if err := store.ValidateKey(g.Owner, g.SystemID); err != nil {
		return err
	}
	g.ID, g.CreatedAt = "g_"+rand.Text(), now()
	g.ExpiresAt = g.ExpiresAt.UTC().Truncate(time.Microsecond)
	return d.inTx(ctx, func(tx *sql.Tx) error {
		if err := checkRoom(ctx, tx, "grants", g.Owner, g.SystemID, p.Max); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO grants (`+grantColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			g.ID, g.Owner, g.SystemID, g.Principal, g.Path, g.Access, micros(g.ExpiresAt), g.CreatedAt.UnixMicro()); err != nil {
			return fmt.Errorf("sqlite: create grant: %w", err)
		}
		return nil
	})
}

// checkRoom is the check before a grant or link is inserted in tx: ErrNotFound if owner has
// no system id, a *store.LimitError if max > 0 and the system already has max rows in table
// ("grants" or "links"). Every transaction begins IMMEDIATE, holding the database's one write
// lock from its first statement to its commit, so the count stays true until the insert
// commits: concurrent creators (other connections or processes) queue behind it.
func checkRoom(ctx context.Context, tx *sql.Tx, table, owner, id string, max int) error {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT CASE WHEN ? > 0 THEN (SELECT count(*) FROM `+table+` WHERE owner = ? AND system_id = ?) ELSE 0 END
		FROM systems WHERE owner = ? AND id = ?`, max, owner, id, owner, id).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("system %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: count %s: %w", table, err)
	}
	if max > 0 && n >= max {
		return &store.LimitError{SystemID: id, What: table, Max: max}
	}
	return nil
}

// ListGrants implements store.AccessStore.
func (d *DB) ListGrants(ctx context.Context, p *store.GrantListParams) ([]store.Grant, error) {
	var (
		where []string
		args  []any
	)
	if p.SystemID != "" {
		where, args = append(where, "owner = ? AND system_id = ?"), append(args, p.Owner, p.SystemID)
	} else {
		if len(p.Principals) == 0 {
			return []store.Grant{}, nil
		}
		where = append(where, "principal IN (?"+strings.Repeat(", ?", len(p.Principals)-1)+")")
		for _, pr := range p.Principals {
			args = append(args, pr)
		}
		if p.Owner != "" {
			where, args = append(where, "owner = ?"), append(args, p.Owner)
		}
	}
	if !p.Now.IsZero() {
		where, args = append(where, "(expires_at = 0 OR expires_at > ?)"), append(args, p.Now.UnixMicro())
	}
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list grants: %w", err)
	}
	rows, err := d.db.QueryContext(ctx, `SELECT `+grantColumns+`
		FROM grants WHERE `+strings.Join(where, " AND ")+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list grants: %w", err)
	}
	defer rows.Close()
	out := []store.Grant{}
	for rows.Next() {
		g, err := scanGrant(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list grants: %w", err)
		}
		out = append(out, *g)
	}
	return out, rows.Err()
}

const grantColumns = `id, owner, system_id, principal, path, access, expires_at, created_at`

func scanGrant(r scanner) (*store.Grant, error) {
	var (
		g          store.Grant
		exp, creat int64
	)
	if err := r.Scan(&g.ID, &g.Owner, &g.SystemID, &g.Principal, &g.Path, &g.Access, &exp, &creat); err != nil {
		return nil, err
	}
	g.ExpiresAt, g.CreatedAt = fromMicrosOrZero(exp), fromMicros(creat)
	return &g, nil
}

// DeleteGrant implements store.AccessStore.
func (d *DB) DeleteGrant(ctx context.Context, p *store.GrantDeleteParams) error {
	res, err := d.db.ExecContext(ctx, `DELETE FROM grants WHERE owner = ? AND system_id = ? AND id = ?`, p.Owner, p.SystemID, p.ID)
	if err != nil {
		return fmt.Errorf("sqlite: delete grant: %w", err)
	}
	return mustAffect(res, fmt.Sprintf("grant %q", p.ID))
}

const linkColumns = `id, owner, system_id, path, access, secret_hash, expires_at, max_uses, uses, created_at`

func scanLink(r scanner) (*store.Link, error) {
	var (
		l          store.Link
		exp, creat int64
	)
	if err := r.Scan(&l.ID, &l.Owner, &l.SystemID, &l.Path, &l.Access, &l.SecretHash, &exp, &l.MaxUses, &l.Uses, &creat); err != nil {
		return nil, err
	}
	l.ExpiresAt, l.CreatedAt = fromMicros(exp), fromMicros(creat)
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
	return d.inTx(ctx, func(tx *sql.Tx) error {
		if err := checkRoom(ctx, tx, "links", l.Owner, l.SystemID, p.Max); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO links (`+linkColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)`,
			l.ID, l.Owner, l.SystemID, l.Path, l.Access, nonNil(l.SecretHash), l.ExpiresAt.UnixMicro(), l.MaxUses, l.CreatedAt.UnixMicro())
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return fmt.Errorf("link %q: %w", l.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create link: %w", err)
		}
		return nil
	})
}

// GetLink implements store.AccessStore.
func (d *DB) GetLink(ctx context.Context, p *store.LinkGetParams) (*store.Link, error) {
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get link: %w", err)
	}
	l, err := scanLink(d.db.QueryRowContext(ctx, `SELECT `+linkColumns+` FROM links WHERE id = ?`, p.ID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("link: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get link: %w", err)
	}
	return l, nil
}

// ListLinks implements store.AccessStore.
func (d *DB) ListLinks(ctx context.Context, p *store.LinkListParams) ([]store.Link, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+linkColumns+` FROM links WHERE owner = ? AND system_id = ? ORDER BY created_at, id`, p.Owner, p.SystemID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list links: %w", err)
	}
	defer rows.Close()
	out := []store.Link{}
	for rows.Next() {
		l, err := scanLink(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list links: %w", err)
		}
		out = append(out, *l)
	}
	return out, rows.Err()
}

// DeleteLink implements store.AccessStore.
func (d *DB) DeleteLink(ctx context.Context, p *store.LinkDeleteParams) error {
	res, err := d.db.ExecContext(ctx, `DELETE FROM links WHERE owner = ? AND system_id = ? AND id = ?`, p.Owner, p.SystemID, p.ID)
	if err != nil {
		return fmt.Errorf("sqlite: delete link: %w", err)
	}
	return mustAffect(res, fmt.Sprintf("link %q", p.ID))
}

// UseLink implements store.AccessStore.
func (d *DB) UseLink(ctx context.Context, p *store.LinkUseParams) (*store.Link, error) {
	l, err := scanLink(d.db.QueryRowContext(ctx, `UPDATE links SET uses = uses + 1
		WHERE id = ? AND expires_at > ? AND (max_uses = 0 OR uses < max_uses)
		RETURNING `+linkColumns, p.ID, p.Now.UnixMicro()))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("link: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: use link: %w", err)
	}
	return l, nil
}

// QueryAudit implements store.AccessStore.
func (d *DB) QueryAudit(ctx context.Context, p *store.AuditQueryParams) ([]store.AuditEntry, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultAuditLimit
	}
	where, args := []string{"1 = 1"}, []any{}
	add := func(cond string, a ...any) { where, args = append(where, cond), append(args, a...) }
	if p.Visible != "" {
		add("(owner = ? OR system_owner = ?)", p.Visible, p.Visible)
	}
	if p.Principal != "" {
		add("owner = ?", p.Principal)
	}
	if p.SystemOwner != "" {
		add("(system_owner = ? OR (system_owner = '' AND owner = ?))", p.SystemOwner, p.SystemOwner)
	}
	if p.System != "" {
		add("system_id = ?", p.System)
	}
	if p.PathPrefix != "" {
		add("EXISTS (SELECT 1 FROM json_each(paths) WHERE substr(json_each.value, 1, length(?)) = ?)", p.PathPrefix, p.PathPrefix)
	}
	if !p.Since.IsZero() {
		add("time >= ?", p.Since.UnixMicro())
	}
	if !p.Until.IsZero() {
		add("time < ?", p.Until.UnixMicro())
	}
	if p.BeforeSeq > 0 {
		add("seq < ?", p.BeforeSeq)
	}
	args = append(args, limit)
	rows, err := d.db.QueryContext(ctx, `SELECT `+auditColumns+`
		FROM audit_log WHERE `+strings.Join(where, " AND ")+` ORDER BY seq DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query audit: %w", err)
	}
	defer rows.Close()
	out := []store.AuditEntry{}
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: query audit: %w", err)
		}
		out = append(out, *e)
	}
	return out, rows.Err()
}

const auditColumns = `seq, time, owner, action, system_id, detail, system_owner, paths, status, bytes, request_id, link_id`

func scanAudit(r scanner) (*store.AuditEntry, error) {
	var (
		e     store.AuditEntry
		us    int64
		paths string
	)
	if err := r.Scan(&e.Seq, &us, &e.Owner, &e.Action, &e.SystemID, &e.Detail, &e.SystemOwner, &paths, &e.Status, &e.Bytes, &e.RequestID, &e.LinkID); err != nil {
		return nil, err
	}
	e.Time = fromMicros(us)
	if err := json.Unmarshal([]byte(paths), &e.Paths); err != nil {
		return nil, fmt.Errorf("audit paths: %w", err)
	}
	return &e, nil
}

// PurgeAudit implements store.AccessStore.
func (d *DB) PurgeAudit(ctx context.Context, p *store.AuditPurgeParams) (int64, error) {
	res, err := d.db.ExecContext(ctx, `DELETE FROM audit_log WHERE time < ?`, p.Before.UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge audit: %w", err)
	}
	return res.RowsAffected()
}

// SetDisabled implements store.AccessStore.
func (d *DB) SetDisabled(ctx context.Context, p *store.DisabledParams) error {
	if p.Owner == "" {
		return fmt.Errorf("%w: empty owner", store.ErrInvalid)
	}
	q := `DELETE FROM disabled WHERE owner = ? AND system_id = ?`
	if p.Disabled {
		q = `INSERT INTO disabled (owner, system_id) VALUES (?, ?) ON CONFLICT DO NOTHING`
	}
	if _, err := d.db.ExecContext(ctx, q, p.Owner, p.SystemID); err != nil {
		return fmt.Errorf("sqlite: set disabled: %w", err)
	}
	return nil
}

// IsDisabled implements store.AccessStore.
func (d *DB) IsDisabled(ctx context.Context, p *store.DisabledParams) (bool, error) {
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return false, fmt.Errorf("sqlite: is disabled: %w", err)
	}
	var n int
	err = d.db.QueryRowContext(ctx, `SELECT count(*) FROM disabled WHERE owner = ? AND system_id IN ('', ?)`, p.Owner, p.SystemID).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("sqlite: is disabled: %w", err)
	}
	return n > 0, nil
}

// AccessStamp implements store.AccessStore.
func (d *DB) AccessStamp(ctx context.Context, p *store.AccessStampParams) (store.AccessStamp, error) {
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return store.AccessStamp{}, fmt.Errorf("sqlite: access stamp: %w", err)
	}
	var st store.AccessStamp
	var grants, disabled int
	err = d.db.QueryRowContext(ctx, `SELECT
		COALESCE((SELECT updated_at FROM systems WHERE owner = ? AND id = ?), 0),
		COALESCE((SELECT generation FROM credentials WHERE owner = ? AND system_id = ?), 0),
		(SELECT count(*) FROM grants WHERE id = ? AND owner = ? AND system_id = ? AND (expires_at = 0 OR expires_at > ?)),
		(SELECT count(*) FROM disabled WHERE (owner = ? AND system_id = '') OR (owner = ? AND system_id IN ('', ?))),
		COALESCE((SELECT groups FROM user_groups WHERE username = ?), '')`,
		p.Owner, p.SystemID, p.Owner, p.SystemID, p.GrantID, p.Owner, p.SystemID, p.Now.UnixMicro(),
		p.Caller, p.Owner, p.SystemID, p.Caller).Scan(&st.SystemUpdated, &st.CredentialGeneration, &grants, &disabled, &st.CallerGroups)
	if err != nil {
		return store.AccessStamp{}, fmt.Errorf("sqlite: access stamp: %w", err)
	}
	st.GrantLive, st.Disabled = grants > 0, disabled > 0
	return st, nil
}

// ListAllSystems implements store.AccessStore.
func (d *DB) ListAllSystems(ctx context.Context) ([]store.System, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+systemColumns+` FROM systems ORDER BY owner, id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list all systems: %w", err)
	}
	defer rows.Close()
	out := []store.System{}
	for rows.Next() {
		s, err := scanSystem(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list all systems: %w", err)
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
	g, err := json.Marshal(nonNilStrings(p.Groups))
	if err != nil {
		return fmt.Errorf("sqlite: put user groups: %w", err)
	}
	if _, err := d.db.ExecContext(ctx, `INSERT INTO user_groups (username, groups) VALUES (?, ?)
		ON CONFLICT (username) DO UPDATE SET groups = excluded.groups`, p.User, string(g)); err != nil {
		return fmt.Errorf("sqlite: put user groups: %w", err)
	}
	return nil
}

// GetUserGroups implements store.AccessStore.
func (d *DB) GetUserGroups(ctx context.Context, p *store.UserGroupsParams) ([]string, error) {
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get user groups: %w", err)
	}
	var g string
	err = d.db.QueryRowContext(ctx, `SELECT groups FROM user_groups WHERE username = ?`, p.User).Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get user groups: %w", err)
	}
	var out []string
	if err := json.Unmarshal([]byte(g), &out); err != nil {
		return nil, fmt.Errorf("sqlite: user groups: %w", err)
	}
	return out, nil
}

// AppendAuditBatch implements store.AccessStore.
//
// Only BEGIN (which waits for the write lock) and COMMIT watch ctx: the inserts run in the
// transaction that holds the lock already, so they wait for nothing, and are given a context
// that cannot be cancelled (see lookupCtx) to spare a watcher goroutine per entry.
func (d *DB) AppendAuditBatch(ctx context.Context, p *store.AuditAppendParams) error {
	return d.inTx(ctx, func(tx *sql.Tx) error {
		st := tx.StmtContext(ctx, d.auditInsert)
		defer st.Close()
		ictx := context.WithoutCancel(ctx)
		for _, e := range p.Entries {
			if err := appendAudit(ictx, st, e); err != nil {
				return err
			}
		}
		return nil
	})
}
