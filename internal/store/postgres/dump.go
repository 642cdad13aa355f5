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

// Load implements store.Loader. The store must hold no systems yet.
func (d *DB) Load(ctx context.Context, dump *store.Dump) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM systems`).Scan(&n); err != nil {
			return fmt.Errorf("postgres: load: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("postgres: load: the target already holds %d systems: %w", n, store.ErrConflict)
		}
		for _, s := range dump.Systems {
			if _, err := tx.Exec(ctx, `INSERT INTO systems (`+systemColumns+`)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
				s.Owner, s.ID, s.Host, s.Port, nonNilStrings(s.HostKeys), nonNilStrings(s.HostKeyFingerprints),
				s.TrustOnFirstUse, s.MaxSessions, s.RootDir, s.Description, s.CreatedAt, s.UpdatedAt, s.Jump,
				nonNilStrings(s.Ciphers), nonNilStrings(s.KeyExchanges)); err != nil {
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
		for _, e := range dump.Audit {
			if _, err := tx.Exec(ctx, `INSERT INTO audit_log (time, owner, action, system_id, detail) VALUES ($1, $2, $3, $4, $5)`,
				e.Time, e.Owner, e.Action, e.SystemID, e.Detail); err != nil {
				return fmt.Errorf("postgres: load audit: %w", err)
			}
		}
		return nil
	})
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
