package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/sshapi/sshapi/internal/store"
)

var (
	_ store.Dumper    = (*DB)(nil)
	_ store.Rewrapper = (*DB)(nil)
)

// Dump implements store.Dumper. It reads in one transaction, so the parts agree.
func (d *DB) Dump(ctx context.Context) (*store.Dump, error) {
	out := &store.Dump{}
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if out.Systems, err = dumpRows(ctx, tx, "systems", `SELECT `+systemColumns+` FROM systems ORDER BY owner, id`, scanSystem); err != nil {
			return err
		}
		if out.Credentials, err = credentials(ctx, tx); err != nil {
			return err
		}
		if out.Grants, err = dumpRows(ctx, tx, "grants", `SELECT `+grantColumns+` FROM grants ORDER BY created_at, id`, scanGrant); err != nil {
			return err
		}
		if out.Links, err = dumpRows(ctx, tx, "links", `SELECT `+linkColumns+` FROM links ORDER BY created_at, id`, scanLink); err != nil {
			return err
		}
		if out.Disabled, err = dumpRows(ctx, tx, "disabled", `SELECT owner, system_id FROM disabled ORDER BY owner, system_id`,
			func(r scanner) (*store.DisabledParams, error) {
				p := store.DisabledParams{Disabled: true}
				return &p, r.Scan(&p.Owner, &p.SystemID)
			}); err != nil {
			return err
		}
		if out.UserGroups, err = dumpRows(ctx, tx, "user groups", `SELECT username, groups FROM user_groups ORDER BY username`,
			func(r scanner) (*store.UserGroupsParams, error) {
				var (
					p store.UserGroupsParams
					g string
				)
				if err := r.Scan(&p.User, &g); err != nil {
					return nil, err
				}
				return &p, json.Unmarshal([]byte(g), &p.Groups)
			}); err != nil {
			return err
		}
		out.Audit, err = dumpRows(ctx, tx, "audit", `SELECT `+auditColumns+` FROM audit_log ORDER BY seq`, scanAudit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// dumpRows reads every row of query with scan.
func dumpRows[T any](ctx context.Context, q querier, what, query string, scan func(scanner) (*T, error)) ([]T, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("sqlite: dump %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: dump %s: %w", what, err)
		}
		out = append(out, *v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: dump %s: %w", what, err)
	}
	return out, nil
}

// querier is a *sql.DB or *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// credentials reads every credential.
func credentials(ctx context.Context, q querier) ([]store.Credential, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+credentialColumns+` FROM credentials ORDER BY owner, system_id`)
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
	creds, err := credentials(ctx, d.db)
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
