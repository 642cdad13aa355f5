package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sshapi/sshapi/internal/store"
)

var (
	_ store.Loader    = (*DB)(nil)
	_ store.Rewrapper = (*DB)(nil)
)

// loadTables are the tables Load fills; each must be empty.
var loadTables = []string{"systems", "credentials", "grants", "links", "disabled", "user_groups", "audit_log"}

// Load implements store.Loader. The store must be empty (no systems, credentials, grants, links,
// switches, groups or audit entries), else ErrConflict and nothing is written.
func (d *DB) Load(ctx context.Context, dump *store.Dump) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		for _, t := range loadTables {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+t).Scan(&n); err != nil {
				return fmt.Errorf("postgres: load: %w", err)
			}
			if n > 0 {
				return fmt.Errorf("postgres: load: the target already holds %d rows in %s: %w", n, t, store.ErrConflict)
			}
		}
		for _, s := range dump.Systems {
			if _, err := tx.Exec(ctx, `INSERT INTO systems (`+systemColumns+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
				s.Owner, s.ID, s.Host, s.Port, nonNilStrings(s.HostKeys), nonNilStrings(s.HostKeyFingerprints),
				s.TrustOnFirstUse, s.MaxSessions, s.RootDir, s.Description, s.CreatedAt, s.UpdatedAt, s.Jump,
				nonNilStrings(s.Ciphers), nonNilStrings(s.KeyExchanges), s.KindOf(), s.Endpoint, s.Region,
				s.Bucket, s.Prefix, s.PathStyle); err != nil {
				return fmt.Errorf("postgres: load system %s/%s: %w", s.Owner, s.ID, err)
			}
		}
		var maxGen int64
		for _, c := range dump.Credentials {
			if _, err := tx.Exec(ctx, `INSERT INTO credentials (`+credentialColumns+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
				c.Owner, c.SystemID, c.Username, c.KeyType, c.PublicKeyFingerprint, c.Certificate,
				c.Sealed.KeyID, nonNil(c.Sealed.WrappedKey), nonNil(c.Sealed.Ciphertext), c.Generation, c.CreatedAt); err != nil {
				return fmt.Errorf("postgres: load credential %s/%s: %w", c.Owner, c.SystemID, err)
			}
			maxGen = max(maxGen, c.Generation)
		}
		if maxGen > 0 {
			if _, err := tx.Exec(ctx, `SELECT setval('credential_generation', GREATEST($1, (SELECT last_value FROM credential_generation)))`, maxGen); err != nil {
				return fmt.Errorf("postgres: load: credential generation: %w", err)
			}
		}
		for _, g := range dump.Grants {
			if _, err := tx.Exec(ctx, `INSERT INTO grants (id, owner, system_id, principal, path, access, expires_at, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
				g.ID, g.Owner, g.SystemID, g.Principal, g.Path, g.Access, nullTime(g.ExpiresAt), g.CreatedAt); err != nil {
				return fmt.Errorf("postgres: load grant %s: %w", g.ID, err)
			}
		}
		for _, l := range dump.Links {
			if _, err := tx.Exec(ctx, `INSERT INTO links (`+linkColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
				l.ID, l.Owner, l.SystemID, l.Path, l.Access, nonNil(l.SecretHash), l.ExpiresAt, l.MaxUses, l.Uses, l.CreatedAt); err != nil {
				return fmt.Errorf("postgres: load link %s: %w", l.ID, err)
			}
		}
		for _, s := range dump.Disabled {
			if _, err := tx.Exec(ctx, `INSERT INTO disabled (owner, system_id) VALUES ($1, $2)`, s.Owner, s.SystemID); err != nil {
				return fmt.Errorf("postgres: load disabled %s/%s: %w", s.Owner, s.SystemID, err)
			}
		}
		for _, u := range dump.UserGroups {
			if _, err := tx.Exec(ctx, `INSERT INTO user_groups (username, groups) VALUES ($1, $2)`, u.User, nonNilStrings(u.Groups)); err != nil {
				return fmt.Errorf("postgres: load groups of %s: %w", u.User, err)
			}
		}
		return loadAudit(ctx, tx, dump.Audit)
	})
}

// loadAudit copies entries with their sequence numbers and moves the sequence past them.
func loadAudit(ctx context.Context, tx pgx.Tx, entries []store.AuditEntry) error {
	var maxSeq int64
	rows := make([][]any, 0, len(entries))
	for _, e := range entries {
		if e.Seq <= 0 {
			return fmt.Errorf("postgres: load audit: entry without a sequence number: %w", store.ErrInvalid)
		}
		maxSeq = max(maxSeq, e.Seq)
		rows = append(rows, []any{e.Seq, e.Time, e.Owner, e.Action, e.SystemID, e.Detail, e.SystemOwner,
			nonNilStrings(e.Paths), int32(e.Status), e.Bytes, e.RequestID, e.LinkID})
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"audit_log"}, []string{"seq", "time", "owner", "action", "system_id", "detail",
		"system_owner", "paths", "status", "bytes", "request_id", "link_id"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("postgres: load audit: %w", err)
	}
	if maxSeq > 0 {
		if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence('audit_log', 'seq'), $1)`, maxSeq); err != nil {
			return fmt.Errorf("postgres: load audit: sequence: %w", err)
		}
	}
	return nil
}

// RewrapCredentials implements store.Rewrapper.
func (d *DB) RewrapCredentials(ctx context.Context, fn store.RewrapFunc) (int, error) {
	rows, err := d.pool.Query(ctx, `SELECT `+credentialColumns+` FROM credentials ORDER BY owner, system_id`)
	if err != nil {
		return 0, fmt.Errorf("postgres: read credentials: %w", err)
	}
	creds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Credential, error) {
		var c store.Credential
		err := r.Scan(&c.Owner, &c.SystemID, &c.Username, &c.KeyType, &c.PublicKeyFingerprint, &c.Certificate,
			&c.Sealed.KeyID, &c.Sealed.WrappedKey, &c.Sealed.Ciphertext, &c.Generation, &c.CreatedAt)
		return c, err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: read credentials: %w", err)
	}
	n := 0
	for i := range creds {
		c := &creds[i]
		s, ok, err := fn(c)
		if err != nil {
			return n, fmt.Errorf("rewrap credential %s/%s: %w", c.Owner, c.SystemID, err)
		}
		if !ok {
			continue
		}
		tag, err := d.pool.Exec(ctx, `UPDATE credentials SET sealed_key_id = $1, sealed_wrapped_key = $2
			WHERE owner = $3 AND system_id = $4 AND generation = $5`, s.KeyID, s.WrappedKey, c.Owner, c.SystemID, c.Generation)
		if err != nil {
			return n, fmt.Errorf("postgres: rewrap credential: %w", err)
		}
		if tag.RowsAffected() == 1 {
			n++
		}
	}
	return n, nil
}
