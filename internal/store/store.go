// Package store defines sshapi's persistent domain types (systems, encrypted
// credentials, the audit log) and the Store interface that every database
// driver implements. Drivers live in subpackages (sqlite, later postgres);
// storetest holds the contract suite they must all pass.
//
// Everything is namespaced by owner, the authenticated user's id: a method
// given one owner never reads, changes or reveals another owner's rows.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sshapi/sshapi/internal/secret"
)

// ErrNotFound is wrapped by errors for a system or credential that does not
// exist for the given owner.
var ErrNotFound = errors.New("store: not found")

// ErrConflict is wrapped by errors for a create whose key already exists.
var ErrConflict = errors.New("store: already exists")

// ErrInvalid is wrapped by errors for a value the store refuses to persist,
// such as an empty owner or id.
var ErrInvalid = errors.New("store: invalid value")

// The kinds of system.
const (
	// KindSSH is an SSH host (files over SFTP, commands, jobs); the default.
	KindSSH = "ssh"
	// KindS3 is an S3 bucket (files only), optionally under a key prefix.
	KindS3 = "s3"
)

// System is an HPC login host or an S3 bucket registered by an owner, with
// what is needed to connect to it safely.
type System struct {
	// Owner is the user who registered the system; (Owner, ID) is the key.
	Owner string
	// ID is the owner's name for the system.
	ID string
	// Kind is KindSSH (also when empty) or KindS3. The SSH fields below
	// (Host to KeyExchanges) are for KindSSH, the S3 fields for KindS3.
	Kind string
	// Endpoint is an S3 system's endpoint URL (http or https).
	Endpoint string
	// Region is an S3 system's signing region.
	Region string
	// Bucket is an S3 system's bucket.
	Bucket string
	// Prefix, if set, is the key prefix under which an S3 system's files
	// live (its root), without leading or trailing slash.
	Prefix string
	// PathStyle addresses the bucket as endpoint/bucket rather than
	// bucket.endpoint.
	PathStyle bool
	// Host and Port are the SSH server's address.
	Host string
	Port int
	// HostKeys are authorized_keys-style lines accepted for the server,
	// e.g. "ssh-ed25519 AAAA..." or "@cert-authority *.example ssh-ed25519 AAAA...".
	HostKeys []string
	// HostKeyFingerprints are accepted server key fingerprints ("SHA256:...").
	HostKeyFingerprints []string
	// TrustOnFirstUse allows recording the server's key on first connect
	// when neither HostKeys nor HostKeyFingerprints is set.
	TrustOnFirstUse bool
	// MaxSessions is the number of channels one connection may carry
	// (the server's MaxSessions); 0 means the pool default.
	MaxSessions int
	// RootDir, if set, confines file operations to this directory.
	RootDir string
	// Description is free text for people.
	Description string
	// Jump, if set, is the ID of another of the owner's systems through which
	// connections to this one are made (OpenSSH's ProxyJump).
	Jump string
	// Ciphers and KeyExchanges restrict the SSH algorithms offered, in order
	// of preference; empty means the client library's defaults.
	Ciphers, KeyExchanges []string
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt, UpdatedAt time.Time
}

// Credential is an owner's login for one of their systems: an SSH key, or an
// S3 system's access keys (then KeyType is CredentialS3, Username holds the
// access key id, which is not secret, and Sealed the JSON of the keys). The
// private key or secret key is only ever held sealed.
type Credential struct {
	// Owner and SystemID name the system this credential logs in to.
	Owner, SystemID string
	// Username is the remote account.
	Username string
	// KeyType is the SSH key algorithm, e.g. "ssh-ed25519".
	KeyType string
	// PublicKeyFingerprint is the key's "SHA256:..." fingerprint.
	PublicKeyFingerprint string
	// Certificate is an optional OpenSSH user certificate (public).
	Certificate string
	// Sealed is the encrypted private key in unencrypted OpenSSH form.
	Sealed secret.Sealed
	// Generation is set by the store on every PutCredential. It is unique
	// across the whole store and strictly increasing, so it never repeats
	// for an (Owner, SystemID) even after a delete and re-create; connection
	// pools key on it so that a changed credential gets fresh connections.
	Generation int64
	// CreatedAt is set by the store on every PutCredential.
	CreatedAt time.Time
}

// CredentialS3 is the KeyType of an S3 system's access keys.
const CredentialS3 = "s3"

// AuditEntry records one security-relevant action by an owner. Detail must
// never contain secrets.
type AuditEntry struct {
	// Time is when the action happened; the store sets it if zero.
	Time time.Time
	// Owner is the user who acted.
	Owner string
	// Action names what was done, e.g. "credential.put".
	Action string
	// SystemID is the system acted on, if any.
	SystemID string
	// Detail is free, non-secret context.
	Detail string
	// Seq orders entries; set by the store.
	Seq int64
	// SystemOwner is the owner whose system was acted on (the acting-as owner of a grantee or
	// a link); empty means Owner.
	SystemOwner string
	// Paths are the remote paths involved, if any.
	Paths []string
	// Status is the HTTP status (or 0 for actions without one).
	Status int
	// Bytes is how much data the action moved.
	Bytes int64
	// RequestID and LinkID tie the entry to a request and a link.
	RequestID, LinkID string
	// ID, when set, makes appending idempotent: an entry whose ID is stored already is not
	// stored again (an entry replayed from an audit spool, or retried after a commit whose
	// answer was lost). Empty means no such check. NewAuditID makes one.
	ID string
}

// SystemCreateParams is a system to create and the most systems its owner may have.
type SystemCreateParams struct {
	System *System
	// Max, when > 0, refuses the system if its owner already has Max systems.
	Max int
}

// Store persists systems, credentials and the audit log. Implementations are
// safe for concurrent use. Times are returned in UTC, truncated to the
// microsecond. Errors for missing or duplicate rows wrap ErrNotFound or
// ErrConflict.
type Store interface {
	// CreateSystem inserts s and sets its CreatedAt and UpdatedAt. It fails
	// with ErrConflict if (s.Owner, s.ID) exists.
	CreateSystem(ctx context.Context, s *System) error
	// CreateSystemAtMost is CreateSystem refusing the system (a *LimitError) when p.Max > 0
	// and p.System.Owner already has p.Max systems. The count and the insert are atomic:
	// concurrent creates, on any number of instances sharing the database, never leave more
	// than Max.
	CreateSystemAtMost(ctx context.Context, p *SystemCreateParams) error
	// GetSystem returns the owner's system id, or ErrNotFound.
	GetSystem(ctx context.Context, owner, id string) (*System, error)
	// ListSystems returns the owner's systems sorted by ID (never nil).
	ListSystems(ctx context.Context, owner string) ([]System, error)
	// UpdateSystem replaces every field of (s.Owner, s.ID) but CreatedAt,
	// sets s.UpdatedAt and s.CreatedAt, or fails with ErrNotFound. When
	// s.UpdatedAt is not zero the update is conditional: it fails with
	// ErrConflict if the stored row changed since (its UpdatedAt differs), so
	// a read-modify-write never loses a concurrent change.
	UpdateSystem(ctx context.Context, s *System) error
	// PinHostKey records key (an authorized_keys line) as the system's only
	// host key and clears TrustOnFirstUse, but only while the system has no
	// host key and no fingerprint registered: a compare-and-set, so two
	// first connections can never pin two keys. It returns the system as
	// stored afterwards and whether this call pinned; ErrNotFound if the
	// system does not exist.
	PinHostKey(ctx context.Context, owner, id, key string) (*System, bool, error)
	// DeleteSystem removes the owner's system and its credential, or fails
	// with ErrNotFound.
	DeleteSystem(ctx context.Context, owner, id string) error
	// PutCredential inserts or replaces the credential for
	// (c.Owner, c.SystemID) and sets c.Generation and c.CreatedAt. It fails
	// with ErrNotFound if the owner has no such system.
	PutCredential(ctx context.Context, c *Credential) error
	// GetCredential returns the owner's credential for systemID, or
	// ErrNotFound.
	GetCredential(ctx context.Context, owner, systemID string) (*Credential, error)
	// GetSystemCredential returns the owner's system id and its credential, read
	// together in one query (one snapshot: never a credential of an older or
	// newer system row). The credential is nil when the system has none; a
	// missing system is ErrNotFound. Access decisions read this on every
	// request, so drivers keep the query prepared; a driver may answer from a
	// SystemCache, which returns only what the query would return at the
	// time of the call.
	GetSystemCredential(ctx context.Context, owner, id string) (*System, *Credential, error)
	// DeleteCredential removes the owner's credential for systemID, or fails
	// with ErrNotFound.
	DeleteCredential(ctx context.Context, owner, systemID string) error
	// AppendAudit records e, setting its time if zero.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns up to limit of the owner's entries, newest first
	// (ties broken by insertion order). limit <= 0 means DefaultAuditLimit.
	ListAudit(ctx context.Context, owner string, limit int) ([]AuditEntry, error)
	// AccessStore holds grants, links, the provenance audit and operator switches.
	AccessStore
	// SessionStore holds the web interface's sessions and pending sign-ins.
	SessionStore
	// UploadStore holds resumable uploads in progress.
	UploadStore
	// TempStore records the temporary names requests are writing.
	TempStore
	// Ping checks that the database is reachable.
	Ping(ctx context.Context) error
	// Close releases the database.
	Close() error
}

// KindOf returns s.Kind, KindSSH when it is empty.
func (s *System) KindOf() string {
	if s.Kind == "" {
		return KindSSH
	}
	return s.Kind
}

// DefaultAuditLimit is the number of entries ListAudit returns when given no
// positive limit.
const DefaultAuditLimit = 100

// ValidateKey reports, wrapping ErrInvalid, an empty owner or id. Drivers
// call it before touching the database so that no row is ever keyed by an
// empty owner.
func ValidateKey(owner, id string) error {
	if owner == "" {
		return fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	if id == "" {
		return fmt.Errorf("%w: empty id", ErrInvalid)
	}
	return nil
}
