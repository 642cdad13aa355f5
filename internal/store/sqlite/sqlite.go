// Package sqlite implements store.Store on a single SQLite file using the
// pure-Go modernc.org/sqlite driver, with embedded goose migrations.
//
// Concurrency: the database runs in WAL mode so readers never block the
// writer, every transaction begins IMMEDIATE (taking the write lock up
// front, so a read-then-write transaction can never fail to upgrade), and
// each connection waits up to busy_timeout for the lock instead of failing
// with SQLITE_BUSY. Concurrent writers therefore queue rather than error.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/store"
)

// BusyTimeout is how long a connection waits for another connection's write
// lock before giving up with SQLITE_BUSY.
const BusyTimeout = 5 * time.Second

// maxOpenConns bounds the connection pool. Writes are serialized by SQLite
// anyway; a few connections let reads proceed while one write is in flight.
const maxOpenConns = 8

//go:embed migrations/*.sql
var migrations embed.FS

// DB is a store.Store backed by one SQLite file. It is safe for concurrent
// use.
type DB struct {
	db *sql.DB
	// systemCredential is GetSystemCredential's query, prepared once: database/sql prepares
	// it on each pooled connection the first time that connection runs it and keeps it there,
	// so the SQL is parsed once per connection instead of once per access decision.
	systemCredential *sql.Stmt
	// generation reads the system generation (see store.SystemCache), prepared once like
	// systemCredential; cache holds what GetSystemCredential read under it.
	generation *sql.Stmt
	cache      *store.SystemCache
	// auditInsert is appendAudit's statement, prepared once like systemCredential (the
	// audit writer inserts an entry per audited request).
	auditInsert *sql.Stmt
	// SQLTemps and SQLUploads are queries shared with every driver, run through sharedQuerier.
	store.SQLTemps
	store.SQLUploads
}

var _ store.Store = (*DB)(nil)

// Open opens (creating if needed) the SQLite database at path, configures it
// for concurrent use and applies all pending migrations.
func Open(ctx context.Context, path string) (*DB, error) {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: migrations: %w", err)
	}
	db, err := OpenFile(ctx, path, maxOpenConns, fsys)
	if err != nil {
		return nil, err
	}
	sc, err := db.PrepareContext(ctx, systemCredentialQuery)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	ai, err := db.PrepareContext(ctx, auditInsertQuery)
	if err != nil {
		sc.Close()
		db.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	gq, err := db.PrepareContext(ctx, generationQuery)
	if err != nil {
		sc.Close()
		ai.Close()
		db.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	return &DB{db: db, systemCredential: sc, auditInsert: ai, generation: gq, cache: store.NewSystemCache(maxCachedSystems), SQLTemps: store.SQLTemps{Q: newSharedQuerier(db)}, SQLUploads: store.SQLUploads{Q: newSharedQuerier(db)}}, nil
}

// OpenFile opens (creating if needed) the SQLite file at path with the settings every sshapi
// database uses (WAL, IMMEDIATE transactions, busy_timeout, foreign keys), at most maxConns
// connections, and applies the numbered goose SQL migrations found at the top of migrations.
// Other components with their own file (the transfer queue) open it with this too.
//
// A new file is created with mode 0600, and so are its -wal and -shm files (see createPrivate);
// an existing file keeps its mode.
func OpenFile(ctx context.Context, path string, maxConns int, migrations fs.FS) (*sql.DB, error) {
	if path == "" || strings.ContainsRune(path, '?') || strings.HasPrefix(path, "file:") || path == ":memory:" {
		return nil, fmt.Errorf("sqlite: unsupported database path %q: want a plain file path", path)
	}
	if err := createPrivate(path); err != nil {
		return nil, err
	}
	dsn := path + "?" + strings.Join([]string{
		"_txlock=immediate",
		fmt.Sprintf("_pragma=busy_timeout(%d)", BusyTimeout.Milliseconds()),
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(NORMAL)",
		"_pragma=foreign_keys(1)",
	}, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	if err := migrate(ctx, db, migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	return db, nil
}

// createPrivate creates the database file at path, empty and with mode 0600, unless something
// is already there. SQLite would create it with mode 0644 less the umask, readable by every
// local user; an empty file is an empty database to SQLite, and SQLite's unix VFS creates the
// -wal and -shm files with the mode of the database file, so all three stay private.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	return nil
}

// migrate applies the migrations in fsys that have not run yet.
func migrate(ctx context.Context, db *sql.DB, fsys fs.FS) error {
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// SQL returns the underlying connection pool, for components that share the
// database file (such as the job queue). Transactions begun on it are
// IMMEDIATE.
func (d *DB) SQL() *sql.DB { return d.db }

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// Close closes the database.
func (d *DB) Close() error {
	_ = d.systemCredential.Close() // closed with the pool anyway; the pool's error is the one to report
	_ = d.auditInsert.Close()
	_ = d.generation.Close()
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// inTx runs fn in an IMMEDIATE transaction and commits if fn succeeds.
func (d *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // the error from fn is the one that matters
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// lookupCtx returns the context for a short read on the request path (an indexed lookup of a
// few rows: a system and its credential, grants, the disabled switches): ctx's values without
// its cancellation, or ctx's error if it is done already.
//
// Why: given a context that can be cancelled (Done() != nil), database/sql starts a goroutine
// per query to close its rows when the context ends, and modernc.org/sqlite starts another
// (interruptOnDone, stmt.go) and installs a progress handler to interrupt the statement; for
// a lookup that takes tens of microseconds that machinery costs about as much as the lookup,
// and cancelling could save nothing. Such a read never waits for a lock (WAL readers do not
// block on the writer), so it ends soon whatever ctx does. What it can still wait for is a
// free pooled connection (at most maxOpenConns, each held by a statement or a transaction
// that ends within BusyTimeout), and that wait no longer ends with ctx.
//
// Only this driver does this: the PostgreSQL store's lookups cross a network, where a
// cancelled request must be able to abandon a query that does not come back.
func lookupCtx(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return context.WithoutCancel(ctx), nil
}

// now returns the current time as the store keeps it: UTC, microseconds.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

const systemColumns = `owner, id, host, port, host_keys, host_key_fingerprints,
	trust_on_first_use, max_sessions, root_dir, description, created_at, updated_at,
	jump, ciphers, key_exchanges, kind, endpoint, region, bucket, prefix, path_style`

// CreateSystem implements store.Store.
func (d *DB) CreateSystem(ctx context.Context, s *store.System) error {
	return d.CreateSystemAtMost(ctx, &store.SystemCreateParams{System: s})
}

// CreateSystemAtMost implements store.Store. Its transaction begins IMMEDIATE (see inTx), so
// the owner's count stays true until the insert commits.
func (d *DB) CreateSystemAtMost(ctx context.Context, p *store.SystemCreateParams) error {
	s := p.System
	if err := store.ValidateKey(s.Owner, s.ID); err != nil {
		return err
	}
	keys, fps, err := encodeLists(s)
	if err != nil {
		return err
	}
	ciphers, kex, err := encodeAlgorithms(s)
	if err != nil {
		return err
	}
	t := now()
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		if p.Max > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM systems WHERE owner = ?`, s.Owner).Scan(&n); err != nil {
				return fmt.Errorf("sqlite: count systems: %w", err)
			}
			if n >= p.Max {
				return &store.LimitError{Owner: s.Owner, What: "systems", Max: p.Max}
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO systems (`+systemColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			s.Owner, s.ID, s.Host, s.Port, keys, fps, s.TrustOnFirstUse, s.MaxSessions,
			s.RootDir, s.Description, t.UnixMicro(), t.UnixMicro(), s.Jump, ciphers, kex,
			s.KindOf(), s.Endpoint, s.Region, s.Bucket, s.Prefix, s.PathStyle)
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return fmt.Errorf("system %q: %w", s.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("sqlite: create system: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.CreatedAt, s.UpdatedAt = t, t
	return nil
}

// GetSystem implements store.Store.
func (d *DB) GetSystem(ctx context.Context, owner, id string) (*store.System, error) {
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get system: %w", err)
	}
	row := d.db.QueryRowContext(ctx, `SELECT `+systemColumns+` FROM systems WHERE owner = ? AND id = ?`, owner, id)
	s, err := scanSystem(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("system %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get system: %w", err)
	}
	return s, nil
}

// ListSystems implements store.Store.
func (d *DB) ListSystems(ctx context.Context, owner string) ([]store.System, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+systemColumns+` FROM systems WHERE owner = ? ORDER BY id`, owner)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list systems: %w", err)
	}
	defer rows.Close()
	out := []store.System{}
	for rows.Next() {
		s, err := scanSystem(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list systems: %w", err)
		}
		out = append(out, *s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list systems: %w", err)
	}
	return out, nil
}

// UpdateSystem implements store.Store.
func (d *DB) UpdateSystem(ctx context.Context, s *store.System) error {
	keys, fps, err := encodeLists(s)
	if err != nil {
		return err
	}
	ciphers, kex, err := encodeAlgorithms(s)
	if err != nil {
		return err
	}
	t := now()
	var created int64
	err = d.db.QueryRowContext(ctx, `UPDATE systems SET host = ?, port = ?, host_keys = ?,
		host_key_fingerprints = ?, trust_on_first_use = ?, max_sessions = ?, root_dir = ?,
		description = ?, updated_at = ?, jump = ?, ciphers = ?, key_exchanges = ?,
		kind = ?, endpoint = ?, region = ?, bucket = ?, prefix = ?, path_style = ?
		WHERE owner = ? AND id = ? AND (? = 0 OR updated_at = ?) RETURNING created_at`,
		s.Host, s.Port, keys, fps, s.TrustOnFirstUse, s.MaxSessions, s.RootDir,
		s.Description, t.UnixMicro(), s.Jump, ciphers, kex,
		s.KindOf(), s.Endpoint, s.Region, s.Bucket, s.Prefix, s.PathStyle, s.Owner, s.ID,
		micros(s.UpdatedAt), micros(s.UpdatedAt)).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		if _, gerr := d.GetSystem(ctx, s.Owner, s.ID); gerr != nil {
			return gerr
		}
		return fmt.Errorf("system %q changed concurrently: %w", s.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("sqlite: update system: %w", err)
	}
	s.CreatedAt, s.UpdatedAt = fromMicros(created), t
	return nil
}

// PinHostKey implements store.Store.
func (d *DB) PinHostKey(ctx context.Context, owner, id, key string) (*store.System, bool, error) {
	keys, err := json.Marshal([]string{key})
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: encode host key: %w", err)
	}
	res, err := d.db.ExecContext(ctx, `UPDATE systems SET host_keys = ?, trust_on_first_use = 0, updated_at = ?
		WHERE owner = ? AND id = ? AND host_keys = '[]' AND host_key_fingerprints = '[]'`,
		string(keys), now().UnixMicro(), owner, id)
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: pin host key: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: pin host key: %w", err)
	}
	sys, err := d.GetSystem(ctx, owner, id)
	if err != nil {
		return nil, false, err
	}
	return sys, n == 1, nil
}

// DeleteSystem implements store.Store. The credential goes with it through
// the foreign key's ON DELETE CASCADE.
func (d *DB) DeleteSystem(ctx context.Context, owner, id string) error {
	res, err := d.db.ExecContext(ctx, `DELETE FROM systems WHERE owner = ? AND id = ?`, owner, id)
	if err != nil {
		return fmt.Errorf("sqlite: delete system: %w", err)
	}
	return mustAffect(res, fmt.Sprintf("system %q", id))
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
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM systems WHERE owner = ? AND id = ?`, c.Owner, c.SystemID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("system %q: %w", c.SystemID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("sqlite: put credential: %w", err)
		}
		if err := tx.QueryRowContext(ctx, `UPDATE counters SET value = value + 1
			WHERE name = 'credential_generation' RETURNING value`).Scan(&gen); err != nil {
			return fmt.Errorf("sqlite: next credential generation: %w", err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO credentials (`+credentialColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (owner, system_id) DO UPDATE SET
				username = excluded.username,
				key_type = excluded.key_type,
				public_key_fingerprint = excluded.public_key_fingerprint,
				certificate = excluded.certificate,
				sealed_key_id = excluded.sealed_key_id,
				sealed_wrapped_key = excluded.sealed_wrapped_key,
				sealed_ciphertext = excluded.sealed_ciphertext,
				generation = excluded.generation,
				created_at = excluded.created_at`,
			c.Owner, c.SystemID, c.Username, c.KeyType, c.PublicKeyFingerprint, c.Certificate,
			c.Sealed.KeyID, nonNil(c.Sealed.WrappedKey), nonNil(c.Sealed.Ciphertext), gen, t.UnixMicro())
		if err != nil {
			return fmt.Errorf("sqlite: put credential: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.Generation, c.CreatedAt = gen, t
	return nil
}

// GetCredential implements store.Store.
func (d *DB) GetCredential(ctx context.Context, owner, systemID string) (*store.Credential, error) {
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: get credential: %w", err)
	}
	var (
		c       store.Credential
		created int64
	)
	err = d.db.QueryRowContext(ctx, `SELECT `+credentialColumns+` FROM credentials
		WHERE owner = ? AND system_id = ?`, owner, systemID).Scan(
		&c.Owner, &c.SystemID, &c.Username, &c.KeyType, &c.PublicKeyFingerprint, &c.Certificate,
		&c.Sealed.KeyID, &c.Sealed.WrappedKey, &c.Sealed.Ciphertext, &c.Generation, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("credential for system %q: %w", systemID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get credential: %w", err)
	}
	c.CreatedAt = fromMicros(created)
	return &c, nil
}

// systemCredentialQuery reads a system and its credential (NULLs when it has none) in one
// statement, so in one read snapshot. It leaves out the key columns that lead systemColumns
// (owner, id) and credentialColumns (owner, system_id): the WHERE clause fixes them to the
// arguments (compared exactly: BINARY collation). The driver costs a few allocations per
// column of a result (its name and declared type), so every column left out counts on a
// lookup each access decision makes.
var systemCredentialQuery = `SELECT ` + prefixed("s.", systemColumns, keyColumns) + `, ` + prefixed("c.", credentialColumns, keyColumns) + `,
	(` + generationQuery + `)
	FROM systems s LEFT JOIN credentials c ON c.owner = s.owner AND c.system_id = s.id
	WHERE s.owner = ? AND s.id = ?`

// generationQuery reads the system generation (migration 0010, store.SystemCache).
const generationQuery = `SELECT value FROM counters WHERE name = 'system_generation'`

// maxCachedSystems bounds the systems GetSystemCredential keeps (store.SystemCache): an entry
// is a system row and its sealed credential, about a kilobyte.
const maxCachedSystems = 4096

// keyColumns is how many key columns lead systemColumns and credentialColumns.
const keyColumns = 2

// prefixed qualifies every column but the first skip of a comma-separated list with p.
func prefixed(p, columns string, skip int) string {
	cols := strings.Split(columns, ",")[skip:]
	for i, c := range cols {
		cols[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// GetSystemCredential implements store.Store. It reads the system generation first and answers
// from the cache when it holds the system read under that generation; the generation's one
// column costs the driver a fraction of the row's (see systemCredentialQuery), and every access
// decision makes this lookup. Otherwise it reads the row, with the generation in the same
// statement, and caches it.
func (d *DB) GetSystemCredential(ctx context.Context, owner, id string) (*store.System, *store.Credential, error) {
	ctx, err := lookupCtx(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: get system and credential: %w", err)
	}
	var gen int64
	if err := d.generation.QueryRowContext(ctx).Scan(&gen); err != nil {
		return nil, nil, fmt.Errorf("sqlite: get system and credential: generation: %w", err)
	}
	if sys, cred, ok := d.cache.Get(owner, id, gen); ok {
		return sys, cred, nil
	}
	sys, cred, gen, err := d.readSystemCredential(ctx, owner, id)
	if err != nil {
		return nil, nil, err
	}
	d.cache.Put(owner, id, gen, sys, cred)
	return sys, cred, nil
}

// readSystemCredential reads owner's system id and its credential (nil when it has none) and
// the generation they were read under, in one statement.
func (d *DB) readSystemCredential(ctx context.Context, owner, id string) (*store.System, *store.Credential, int64, error) {
	var (
		sr                  systemRow
		user, keyType, fp   sql.NullString
		cert, keyID         sql.NullString
		wrapped, ciphertext []byte
		gen, created        sql.NullInt64
		systemGen           int64
	)
	dest := append(sr.dest()[keyColumns:], &user, &keyType, &fp, &cert, &keyID, &wrapped, &ciphertext, &gen, &created, &systemGen)
	err := d.systemCredential.QueryRowContext(ctx, owner, id).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, 0, fmt.Errorf("system %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("sqlite: get system and credential: %w", err)
	}
	sr.s.Owner, sr.s.ID = owner, id
	sys, err := sr.system()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("sqlite: get system and credential: %w", err)
	}
	if !gen.Valid { // NOT NULL in a credentials row: no credential joined
		return sys, nil, systemGen, nil
	}
	return sys, &store.Credential{
		Owner: owner, SystemID: id, Username: user.String, KeyType: keyType.String,
		PublicKeyFingerprint: fp.String, Certificate: cert.String,
		Sealed:     secret.Sealed{KeyID: keyID.String, WrappedKey: wrapped, Ciphertext: ciphertext},
		Generation: gen.Int64, CreatedAt: fromMicros(created.Int64),
	}, systemGen, nil
}

// DeleteCredential implements store.Store.
func (d *DB) DeleteCredential(ctx context.Context, owner, systemID string) error {
	res, err := d.db.ExecContext(ctx, `DELETE FROM credentials WHERE owner = ? AND system_id = ?`, owner, systemID)
	if err != nil {
		return fmt.Errorf("sqlite: delete credential: %w", err)
	}
	return mustAffect(res, fmt.Sprintf("credential for system %q", systemID))
}

// AppendAudit implements store.Store.
func (d *DB) AppendAudit(ctx context.Context, e store.AuditEntry) error {
	return appendAudit(ctx, d.auditInsert, e)
}

const auditInsertQuery = `INSERT INTO audit_log (time, owner, action, system_id, detail, system_owner, paths, status, bytes, request_id, link_id, entry_id)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (entry_id) DO NOTHING`

// appendAudit inserts e with st, the prepared auditInsertQuery (or its copy in a transaction).
func appendAudit(ctx context.Context, st *sql.Stmt, e store.AuditEntry) error {
	if e.Owner == "" || e.Action == "" {
		return fmt.Errorf("audit entry without owner or action: %w", store.ErrInvalid)
	}
	t := e.Time.UTC().Truncate(time.Microsecond)
	if e.Time.IsZero() {
		t = now()
	}
	paths, err := json.Marshal(nonNilStrings(e.Paths))
	if err != nil {
		return fmt.Errorf("sqlite: append audit: %w", err)
	}
	var id any // NULL when the entry has no id
	if e.ID != "" {
		id = e.ID
	}
	_, err = st.ExecContext(ctx, t.UnixMicro(), e.Owner, e.Action, e.SystemID, e.Detail,
		e.SystemOwner, string(paths), e.Status, e.Bytes, e.RequestID, e.LinkID, id)
	if err != nil {
		return fmt.Errorf("sqlite: append audit: %w", err)
	}
	return nil
}

// ListAudit implements store.Store.
func (d *DB) ListAudit(ctx context.Context, owner string, limit int) ([]store.AuditEntry, error) {
	if limit <= 0 {
		limit = store.DefaultAuditLimit
	}
	rows, err := d.db.QueryContext(ctx, `SELECT time, owner, action, system_id, detail FROM audit_log
		WHERE owner = ? ORDER BY time DESC, seq DESC LIMIT ?`, owner, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list audit: %w", err)
	}
	defer rows.Close()
	out := []store.AuditEntry{}
	for rows.Next() {
		var (
			e  store.AuditEntry
			us int64
		)
		if err := rows.Scan(&us, &e.Owner, &e.Action, &e.SystemID, &e.Detail); err != nil {
			return nil, fmt.Errorf("sqlite: list audit: %w", err)
		}
		e.Time = fromMicros(us)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list audit: %w", err)
	}
	return out, nil
}

// scanner is what *sql.Row and *sql.Rows have in common.
type scanner interface {
	Scan(dest ...any) error
}

func scanSystem(r scanner) (*store.System, error) {
	var sr systemRow
	if err := r.Scan(sr.dest()...); err != nil {
		return nil, err
	}
	return sr.system()
}

// systemRow is a systems row as scanned (systemColumns, in order), before decoding.
type systemRow struct {
	s                store.System
	keys, fps        string
	ciphers, kex     string
	created, updated int64
}

// dest returns the scan destinations of systemColumns.
func (r *systemRow) dest() []any {
	s := &r.s
	return []any{&s.Owner, &s.ID, &s.Host, &s.Port, &r.keys, &r.fps, &s.TrustOnFirstUse,
		&s.MaxSessions, &s.RootDir, &s.Description, &r.created, &r.updated,
		&s.Jump, &r.ciphers, &r.kex, &s.Kind, &s.Endpoint, &s.Region, &s.Bucket, &s.Prefix,
		&s.PathStyle}
}

// system decodes the scanned row.
func (r *systemRow) system() (*store.System, error) {
	s := r.s
	var err error
	if s.Ciphers, err = decodeList(r.ciphers); err != nil {
		return nil, fmt.Errorf("ciphers of %q: %w", s.ID, err)
	}
	if s.KeyExchanges, err = decodeList(r.kex); err != nil {
		return nil, fmt.Errorf("key_exchanges of %q: %w", s.ID, err)
	}
	if s.HostKeys, err = decodeList(r.keys); err != nil {
		return nil, fmt.Errorf("host_keys of %q: %w", s.ID, err)
	}
	if s.HostKeyFingerprints, err = decodeList(r.fps); err != nil {
		return nil, fmt.Errorf("host_key_fingerprints of %q: %w", s.ID, err)
	}
	s.CreatedAt, s.UpdatedAt = fromMicros(r.created), fromMicros(r.updated)
	return &s, nil
}

// decodeList decodes a JSON array of strings as json.Unmarshal into a nil slice would, without
// running the JSON decoder for the empty list most systems keep in most of their list columns
// (every access decision reads a system row: the decoder was a tenth of that lookup's CPU).
func decodeList(col string) ([]string, error) {
	if col == "[]" {
		return []string{}, nil
	}
	if l, ok := plainList(col); ok {
		return l, nil
	}
	var l []string
	if err := json.Unmarshal([]byte(col), &l); err != nil {
		return nil, err
	}
	return l, nil
}

// plainList decodes col when it is what json.Marshal writes for a non-empty list of strings of
// printable ASCII without quotes or backslashes (host keys, fingerprints, algorithm names):
// ["a","b"], no spaces, no escapes. Anything else is left to encoding/json (ok false).
func plainList(col string) ([]string, bool) {
	if len(col) < 4 || col[0] != '[' || col[len(col)-1] != ']' {
		return nil, false
	}
	n := 1
	for i := 1; i < len(col)-1; i++ {
		if col[i] == ',' {
			n++
		}
	}
	l := make([]string, 0, n)
	rest := col[1 : len(col)-1]
	for {
		if len(rest) < 2 || rest[0] != '"' {
			return nil, false
		}
		end := 1
		for end < len(rest) && rest[end] != '"' {
			if c := rest[end]; c < 0x20 || c > 0x7e || c == '\\' {
				return nil, false
			}
			end++
		}
		if end == len(rest) {
			return nil, false
		}
		l = append(l, rest[1:end])
		rest = rest[end+1:]
		if rest == "" {
			return l, true
		}
		if rest[0] != ',' {
			return nil, false
		}
		rest = rest[1:]
	}
}

// encodeLists returns the system's string lists as JSON arrays ("[]" for
// nil) so that they read back as non-nil slices.
func encodeLists(s *store.System) (keys, fps string, err error) {
	k, err := json.Marshal(nonNilStrings(s.HostKeys))
	if err != nil {
		return "", "", fmt.Errorf("sqlite: encode host keys: %w", err)
	}
	f, err := json.Marshal(nonNilStrings(s.HostKeyFingerprints))
	if err != nil {
		return "", "", fmt.Errorf("sqlite: encode host key fingerprints: %w", err)
	}
	return string(k), string(f), nil
}

// encodeAlgorithms returns the system's cipher and key exchange lists as
// JSON arrays ("[]" for nil).
func encodeAlgorithms(s *store.System) (ciphers, kex string, err error) {
	c, err := json.Marshal(nonNilStrings(s.Ciphers))
	if err != nil {
		return "", "", fmt.Errorf("sqlite: encode ciphers: %w", err)
	}
	k, err := json.Marshal(nonNilStrings(s.KeyExchanges))
	if err != nil {
		return "", "", fmt.Errorf("sqlite: encode key exchanges: %w", err)
	}
	return string(c), string(k), nil
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

// mustAffect returns ErrNotFound about what if res changed no row.
func mustAffect(res sql.Result, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlite: rows affected: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

// isConstraint reports whether err is the SQLite extended result code code.
func isConstraint(err error, code int) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == code
}
