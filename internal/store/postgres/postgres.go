// Package postgres implements store.Store on PostgreSQL with pgx, with embedded goose
// migrations, so that several sshapi instances can share one database.
//
// Conflicts are recognised by PostgreSQL's SQLSTATE codes (unique_violation), never by matching
// error text. Read-modify-write operations are single conditional statements (UpdateSystem with
// the UpdatedAt it read, PinHostKey only while no key is registered), so they are safe with any
// number of instances.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// uniqueViolation is PostgreSQL's SQLSTATE for a duplicate key.
const uniqueViolation = "23505"

// DB is a store.Store backed by a PostgreSQL database. It is safe for concurrent use.
type DB struct {
	pool *pgxpool.Pool
	// SQLTemps and SQLUploads are queries shared with every driver, run through sharedQuerier.
	store.SQLTemps
	store.SQLUploads
}

var _ store.Store = (*DB)(nil)

// Open connects to the database at url (postgres://…) and applies pending migrations.
func Open(ctx context.Context, url string) (*DB, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := Migrate(ctx, pool, migrations); err != nil {
		pool.Close()
		return nil, err
	}
	return &DB{pool: pool, SQLTemps: store.SQLTemps{Q: newSharedQuerier(pool)}, SQLUploads: store.SQLUploads{Q: newSharedQuerier(pool)}}, nil
}

// Migrate applies the numbered goose migrations at the top of fsys (a migrations/ directory
// embedded by the caller) that have not run yet. Concurrent instances starting at once are
// serialised by goose's session lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) error {
	sub, err := fs.Sub(fsys, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("postgres: migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithDisableGlobalRegistry(true), goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// Pool returns the connection pool, for components that share the database.
func (d *DB) Pool() *pgxpool.Pool { return d.pool }

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close closes the pool.
func (d *DB) Close() error {
	d.pool.Close()
	return nil
}

// now returns the current time as the store keeps it: UTC, microseconds.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func isCode(err error, code string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == code
}

const systemColumns = `owner, id, host, port, host_keys, host_key_fingerprints,
	trust_on_first_use, max_sessions, root_dir, description, created_at, updated_at,
	jump, ciphers, key_exchanges, kind, endpoint, region, bucket, prefix, path_style`

func scanSystem(r pgx.Row) (*store.System, error) {
	var s store.System
	if err := r.Scan(systemDest(&s)...); err != nil {
		return nil, err
	}
	normalizeSystem(&s)
	return &s, nil
}

// systemDest returns the scan destinations of systemColumns in s.
func systemDest(s *store.System) []any {
	return []any{&s.Owner, &s.ID, &s.Host, &s.Port, &s.HostKeys, &s.HostKeyFingerprints, &s.TrustOnFirstUse,
		&s.MaxSessions, &s.RootDir, &s.Description, &s.CreatedAt, &s.UpdatedAt, &s.Jump, &s.Ciphers, &s.KeyExchanges,
		&s.Kind, &s.Endpoint, &s.Region, &s.Bucket, &s.Prefix, &s.PathStyle}
}

// normalizeSystem makes a scanned system's lists non-nil and its times UTC.
func normalizeSystem(s *store.System) {
	s.HostKeys, s.HostKeyFingerprints = nonNilStrings(s.HostKeys), nonNilStrings(s.HostKeyFingerprints)
	s.Ciphers, s.KeyExchanges = nonNilStrings(s.Ciphers), nonNilStrings(s.KeyExchanges)
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
}

// CreateSystem implements store.Store.
func (d *DB) CreateSystem(ctx context.Context, s *store.System) error {
	return d.CreateSystemAtMost(ctx, &store.SystemCreateParams{System: s})
}

// CreateSystemAtMost implements store.Store. With a Max, the count and the insert run in one
// transaction holding a transaction-level advisory lock on the owner, so concurrent creates
// for the same owner (on any instance) count one after another.
func (d *DB) CreateSystemAtMost(ctx context.Context, p *store.SystemCreateParams) error {
	s := p.System
	if err := store.ValidateKey(s.Owner, s.ID); err != nil {
		return err
	}
	t := now()
	err := pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if p.Max > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('sshapi.systems:' || $1, 0))`, s.Owner); err != nil {
				return fmt.Errorf("postgres: lock owner's systems: %w", err)
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM systems WHERE owner = $1`, s.Owner).Scan(&n); err != nil {
				return fmt.Errorf("postgres: count systems: %w", err)
			}
			if n >= p.Max {
				return &store.LimitError{Owner: s.Owner, What: "systems", Max: p.Max}
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO systems (`+systemColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`,
			s.Owner, s.ID, s.Host, s.Port, nonNilStrings(s.HostKeys), nonNilStrings(s.HostKeyFingerprints),
			s.TrustOnFirstUse, s.MaxSessions, s.RootDir, s.Description, t, s.Jump, nonNilStrings(s.Ciphers),
			nonNilStrings(s.KeyExchanges), s.KindOf(), s.Endpoint, s.Region, s.Bucket, s.Prefix, s.PathStyle)
		return err
	})
	var le *store.LimitError
	if errors.As(err, &le) {
		return le
	}
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("system %q: %w", s.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("postgres: create system: %w", err)
	}
	s.CreatedAt, s.UpdatedAt = t, t
	return nil
}

// GetSystem implements store.Store.
func (d *DB) GetSystem(ctx context.Context, owner, id string) (*store.System, error) {
	s, err := scanSystem(d.pool.QueryRow(ctx, `SELECT `+systemColumns+` FROM systems WHERE owner = $1 AND id = $2`, owner, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("system %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get system: %w", err)
	}
	return s, nil
}

// ListSystems implements store.Store.
func (d *DB) ListSystems(ctx context.Context, owner string) ([]store.System, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+systemColumns+` FROM systems WHERE owner = $1 ORDER BY id COLLATE "C"`, owner)
	if err != nil {
		return nil, fmt.Errorf("postgres: list systems: %w", err)
	}
	defer rows.Close()
	out := []store.System{}
	for rows.Next() {
		s, err := scanSystem(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: list systems: %w", err)
		}
		out = append(out, *s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list systems: %w", err)
	}
	return out, nil
}

// UpdateSystem implements store.Store.
func (d *DB) UpdateSystem(ctx context.Context, s *store.System) error {
	t := now()
	var prev *time.Time
	if !s.UpdatedAt.IsZero() {
		p := s.UpdatedAt.UTC().Truncate(time.Microsecond)
		prev = &p
	}
	var created time.Time
	err := d.pool.QueryRow(ctx, `UPDATE systems SET host = $1, port = $2, host_keys = $3,
		host_key_fingerprints = $4, trust_on_first_use = $5, max_sessions = $6, root_dir = $7,
		description = $8, updated_at = $9, jump = $13, ciphers = $14, key_exchanges = $15,
		kind = $16, endpoint = $17, region = $18, bucket = $19, prefix = $20, path_style = $21
		WHERE owner = $10 AND id = $11 AND ($12::timestamptz IS NULL OR updated_at = $12) RETURNING created_at`,
		s.Host, s.Port, nonNilStrings(s.HostKeys), nonNilStrings(s.HostKeyFingerprints), s.TrustOnFirstUse,
		s.MaxSessions, s.RootDir, s.Description, t, s.Owner, s.ID, prev, s.Jump, nonNilStrings(s.Ciphers),
		nonNilStrings(s.KeyExchanges), s.KindOf(), s.Endpoint, s.Region, s.Bucket, s.Prefix,
		s.PathStyle).Scan(&created)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, gerr := d.GetSystem(ctx, s.Owner, s.ID); gerr != nil {
			return gerr
		}
		return fmt.Errorf("system %q changed concurrently: %w", s.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("postgres: update system: %w", err)
	}
	s.CreatedAt, s.UpdatedAt = created.UTC(), t
	return nil
}

// PinHostKey implements store.Store.
func (d *DB) PinHostKey(ctx context.Context, owner, id, key string) (*store.System, bool, error) {
	tag, err := d.pool.Exec(ctx, `UPDATE systems SET host_keys = ARRAY[$1::text], trust_on_first_use = false, updated_at = $2
		WHERE owner = $3 AND id = $4 AND cardinality(host_keys) = 0 AND cardinality(host_key_fingerprints) = 0`,
		key, now(), owner, id)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: pin host key: %w", err)
	}
	sys, err := d.GetSystem(ctx, owner, id)
	if err != nil {
		return nil, false, err
	}
	return sys, tag.RowsAffected() == 1, nil
}

// DeleteSystem implements store.Store. The credential goes with it (ON DELETE CASCADE).
func (d *DB) DeleteSystem(ctx context.Context, owner, id string) error {
	tag, err := d.pool.Exec(ctx, `DELETE FROM systems WHERE owner = $1 AND id = $2`, owner, id)
	if err != nil {
		return fmt.Errorf("postgres: delete system: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("system %q: %w", id, store.ErrNotFound)
	}
	return nil
}

const credentialColumns = `owner, system_id, username, key_type, public_key_fingerprint,
	certificate, sealed_key_id, sealed_wrapped_key, sealed_ciphertext, generation, created_at`

// PutCredential implements store.Store.
func (d *DB) PutCredential(ctx context.Context, c *store.Credential) error {
	if err := store.ValidateKey(c.Owner, c.SystemID); err != nil {
		return err
	}
	t := now()
	var gen int64
	// One statement: the credential is written only if the system exists, with the next
	// generation from the sequence.
	err := d.pool.QueryRow(ctx, `INSERT INTO credentials (`+credentialColumns+`)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, nextval('credential_generation'), $10
		FROM systems WHERE owner = $1 AND id = $2
		ON CONFLICT (owner, system_id) DO UPDATE SET
			username = excluded.username, key_type = excluded.key_type,
			public_key_fingerprint = excluded.public_key_fingerprint, certificate = excluded.certificate,
			sealed_key_id = excluded.sealed_key_id, sealed_wrapped_key = excluded.sealed_wrapped_key,
			sealed_ciphertext = excluded.sealed_ciphertext, generation = excluded.generation,
			created_at = excluded.created_at
		RETURNING generation`,
		c.Owner, c.SystemID, c.Username, c.KeyType, c.PublicKeyFingerprint, c.Certificate,
		c.Sealed.KeyID, nonNil(c.Sealed.WrappedKey), nonNil(c.Sealed.Ciphertext), t).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("system %q: %w", c.SystemID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("postgres: put credential: %w", err)
	}
	c.Generation, c.CreatedAt = gen, t
	return nil
}

// GetCredential implements store.Store.
func (d *DB) GetCredential(ctx context.Context, owner, systemID string) (*store.Credential, error) {
	var c store.Credential
	err := d.pool.QueryRow(ctx, `SELECT `+credentialColumns+` FROM credentials WHERE owner = $1 AND system_id = $2`,
		owner, systemID).Scan(&c.Owner, &c.SystemID, &c.Username, &c.KeyType, &c.PublicKeyFingerprint, &c.Certificate,
		&c.Sealed.KeyID, &c.Sealed.WrappedKey, &c.Sealed.Ciphertext, &c.Generation, &c.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("credential for system %q: %w", systemID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get credential: %w", err)
	}
	c.CreatedAt = c.CreatedAt.UTC()
	return &c, nil
}

// systemCredentialQuery reads a system and its credential (NULLs when it has none) in one
// statement, so in one snapshot. pgx prepares and caches it on each pooled connection.
var systemCredentialQuery = `SELECT ` + prefixed("s.", systemColumns) + `, ` + prefixed("c.", credentialColumns) + `
	FROM systems s LEFT JOIN credentials c ON c.owner = s.owner AND c.system_id = s.id
	WHERE s.owner = $1 AND s.id = $2`

// prefixed qualifies every column of a comma-separated list with p.
func prefixed(p, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// GetSystemCredential implements store.Store. Unlike the SQLite store's lookups (lookupCtx
// there), it keeps ctx's cancellation: the query crosses a network, and a request that ends
// must be able to abandon one that does not come back.
func (d *DB) GetSystemCredential(ctx context.Context, owner, id string) (*store.System, *store.Credential, error) {
	var (
		s                                        store.System
		cOwner, cSystem, user, keyType, fp, cert *string
		keyID                                    *string
		wrapped, ciphertext                      []byte
		gen                                      *int64
		created                                  *time.Time
	)
	dest := append(systemDest(&s), &cOwner, &cSystem, &user, &keyType, &fp, &cert, &keyID, &wrapped, &ciphertext, &gen, &created)
	err := d.pool.QueryRow(ctx, systemCredentialQuery, owner, id).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("system %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: get system and credential: %w", err)
	}
	normalizeSystem(&s)
	if cOwner == nil {
		return &s, nil, nil
	}
	return &s, &store.Credential{
		Owner: *cOwner, SystemID: *cSystem, Username: *user, KeyType: *keyType,
		PublicKeyFingerprint: *fp, Certificate: *cert,
		Sealed:     secret.Sealed{KeyID: *keyID, WrappedKey: wrapped, Ciphertext: ciphertext},
		Generation: *gen, CreatedAt: created.UTC(),
	}, nil
}

// DeleteCredential implements store.Store.
func (d *DB) DeleteCredential(ctx context.Context, owner, systemID string) error {
	tag, err := d.pool.Exec(ctx, `DELETE FROM credentials WHERE owner = $1 AND system_id = $2`, owner, systemID)
	if err != nil {
		return fmt.Errorf("postgres: delete credential: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("credential for system %q: %w", systemID, store.ErrNotFound)
	}
	return nil
}

// AppendAudit implements store.Store.
func (d *DB) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	return d.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: []store.AuditEntry{e}})
}

// AppendAuditBatch implements store.AccessStore: one round trip, one transaction.
func (d *DB) AppendAuditBatch(ctx context.Context, p *store.AuditAppendParams) error {
	var b pgx.Batch
	for _, e := range p.Entries {
		if e.Owner == "" || e.Action == "" {
			return fmt.Errorf("audit entry without owner or action: %w", store.ErrInvalid)
		}
		t := e.Time.UTC().Truncate(time.Microsecond)
		if e.Time.IsZero() {
			t = now()
		}
		b.Queue(`INSERT INTO audit_log (time, owner, action, system_id, detail, system_owner, paths, status, bytes, request_id, link_id, entry_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (entry_id) DO NOTHING`, t, e.Owner, e.Action, e.SystemID, e.Detail,
			e.SystemOwner, nonNilStrings(e.Paths), e.Status, e.Bytes, e.RequestID, e.LinkID, entryID(e.ID))
	}
	if b.Len() == 0 {
		return nil
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: append audit: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("postgres: append audit: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: append audit: %w", err)
	}
	return nil
}

// entryID is an audit entry's id as stored: NULL when it has none.
func entryID(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

// ListAudit implements store.Store.
func (d *DB) ListAudit(ctx context.Context, owner string, limit int) ([]store.AuditEntry, error) {
	if limit <= 0 {
		limit = store.DefaultAuditLimit
	}
	rows, err := d.pool.Query(ctx, `SELECT time, owner, action, system_id, detail FROM audit_log
		WHERE owner = $1 ORDER BY time DESC, seq DESC LIMIT $2`, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list audit: %w", err)
	}
	defer rows.Close()
	out := []store.AuditEntry{}
	for rows.Next() {
		var e store.AuditEntry
		if err := rows.Scan(&e.Time, &e.Owner, &e.Action, &e.SystemID, &e.Detail); err != nil {
			return nil, fmt.Errorf("postgres: list audit: %w", err)
		}
		e.Time = e.Time.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list audit: %w", err)
	}
	return out, nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Unavailable reports whether err means the database could not be reached or went away: no
// connection could be made, the connection was lost, or the server is shutting down, starting
// or in recovery (SQLSTATE class 08, 57P01–57P03). The same request may succeed in a moment, so
// the API answers 503 with Retry-After instead of 500.
func (d *DB) Unavailable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return strings.HasPrefix(pg.Code, "08") || pg.Code == "57P01" || pg.Code == "57P02" || pg.Code == "57P03"
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || pgconn.SafeToRetry(err)
}
