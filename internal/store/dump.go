package store

import (
	"context"

	"github.com/sshapi/sshapi/internal/secret"
)

// Dump is the whole content of a store, for copying a deployment to another database
// (`sshapi migrate --from … --to …`). Credentials stay sealed.
type Dump struct {
	Systems     []System
	Credentials []Credential
	// Audit is in insertion order.
	Audit []AuditEntry
}

// Dumper reads a whole store.
type Dumper interface {
	Dump(ctx context.Context) (*Dump, error)
}

// Loader writes a Dump into an empty store in one transaction, keeping times and credential
// generations (later generations continue above the highest loaded).
type Loader interface {
	Load(ctx context.Context, d *Dump) error
}

// RewrapFunc returns c's sealed key re-wrapped (for example under a new primary master key), or
// ok false to leave it.
type RewrapFunc func(c *Credential) (s secret.Sealed, ok bool, err error)

// Rewrapper re-wraps every stored credential's data key. Each row is updated only if it did not
// change since it was read (same generation), so a credential replaced meanwhile is left to its
// new value; it returns how many were re-wrapped.
type Rewrapper interface {
	RewrapCredentials(ctx context.Context, fn RewrapFunc) (int, error)
}
