package sqlite

import (
	"context"
	"fmt"

	"github.com/sshapi/sshapi/internal/store"
)

var (
	_ store.Dumper    = (*DB)(nil)
	_ store.Rewrapper = (*DB)(nil)
)

// Dump implements store.Dumper.
func (d *DB) Dump(ctx context.Context) (*store.Dump, error) {
	out := &store.Dump{}
	rows, err := d.db.QueryContext(ctx, `SELECT `+systemColumns+` FROM systems ORDER BY owner, id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dump systems: %w", err)
	}
	for rows.Next() {
		s, err := scanSystem(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: dump systems: %w", err)
		}
		out.Systems = append(out.Systems, *s)
	}
	rows.Close()
	creds, err := d.allCredentials(ctx)
	if err != nil {
		return nil, err
	}
	out.Credentials = creds
	rows, err = d.db.QueryContext(ctx, `SELECT time, owner, action, system_id, detail FROM audit_log ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dump audit: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var e store.AuditEntry
		var us int64
		if err := rows.Scan(&us, &e.Owner, &e.Action, &e.SystemID, &e.Detail); err != nil {
			return nil, fmt.Errorf("sqlite: dump audit: %w", err)
		}
		e.Time = fromMicros(us)
		out.Audit = append(out.Audit, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: dump audit: %w", err)
	}
	return out, nil
}

func (d *DB) allCredentials(ctx context.Context) ([]store.Credential, error) {
	rows, err := d.db.QueryContext(ctx, `SELECT `+credentialColumns+` FROM credentials ORDER BY owner, system_id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read credentials: %w", err)
	}
	defer rows.Close()
	var out []store.Credential
	for rows.Next() {
		var c store.Credential
		var created int64
		if err := rows.Scan(&c.Owner, &c.SystemID, &c.Username, &c.KeyType, &c.PublicKeyFingerprint, &c.Certificate,
			&c.Sealed.KeyID, &c.Sealed.WrappedKey, &c.Sealed.Ciphertext, &c.Generation, &created); err != nil {
			return nil, fmt.Errorf("sqlite: read credentials: %w", err)
		}
		c.CreatedAt = fromMicros(created)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: read credentials: %w", err)
	}
	return out, nil
}

// RewrapCredentials implements store.Rewrapper.
func (d *DB) RewrapCredentials(ctx context.Context, fn store.RewrapFunc) (int, error) {
	creds, err := d.allCredentials(ctx)
	if err != nil {
		return 0, err
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
		res, err := d.db.ExecContext(ctx, `UPDATE credentials SET sealed_key_id = ?, sealed_wrapped_key = ?
			WHERE owner = ? AND system_id = ? AND generation = ?`, s.KeyID, s.WrappedKey, c.Owner, c.SystemID, c.Generation)
		if err != nil {
			return n, fmt.Errorf("sqlite: rewrap credential: %w", err)
		}
		if k, _ := res.RowsAffected(); k == 1 {
			n++
		}
	}
	return n, nil
}
