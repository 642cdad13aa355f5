// Package access decides who may do what on which system, and how. It turns "this principal
// wants this access to these paths on this system" into a connection target (host, keys,
// credential, host key policy, jump hosts) — or, for an S3 system, a storage.Backend on its
// bucket — and the directories the work is confined to, or into a refusal. Every HTTP route and the transfer engine ask it; grants (to users, groups and every
// signed-in user) and links are decided here and nowhere else.
//
// A grantee acts through the owner's credential and inside the owner's root_dir: a grant's path
// is a further confinement root, judged by package confine like root_dir itself. A grant's or
// link's path must not pass through a symlink below the home or root directory
// (confine.ErrLinkedRoot): shares nest, and whoever writes through an enclosing one could
// otherwise point a nested one anywhere an owner's link leads. An owner who means to share what
// a link points to shares the path it resolves to.
//
// # S3 systems
//
// An S3 system (kind "s3") is decided by the same code as an SSH system: ownership, grants,
// links, operator switches and the audit do not look at the kind; only what the decision
// carries differs (Decision.Storage instead of Decision.Target). Its root is the bucket plus the
// optional key prefix; paths are cleaned and confined by the same rules (package confine), and a
// grant's path is a key prefix boundary ("/a" covers "/a/x", never "/ab").
//
// What concurrent principals can do on a bucket is narrower than on a POSIX tree: a bucket has
// no symbolic links, so a path always names the key it spells and the walk-escape class (a
// directory swapped for a link mid-walk, sending a recursive delete or an archive outside the
// grant) does not exist; every key a listing or a batch delete touches starts with the
// confined prefix, whatever others do meanwhile. A move is a server-side copy followed by a
// delete: not atomic, so others may see both names, or (after a failure between the two) both
// remain; it never touches a key outside the two confined paths. Grantees' operations still go
// through Decision.Hold like on SSH systems, which orders them against each other.
//
// # Concurrency: what a decision reads, and what is kept
//
// Every decision reads the system and its credential from the store, in one query
// (store.GetSystemCredential: one statement, so one snapshot of both rows), and grants with
// another; neither is remembered between requests here. (The SQLite store answers that query
// from a cache only while the database's system generation, moved by triggers in the same
// transaction as any write to a system or credential, is what it was when the entry was read:
// the answer is still that of the database at the time of the request's read; see
// store.SystemCache.) A change that committed before a request reads them — a system deleted or
// edited, a credential deleted or replaced, a grant revoked — is therefore obeyed by that
// request, on every instance sharing the database. What is kept is
// only the work derived from those rows: the signer parsed from the decrypted key (targets),
// keyed by the owner, the system, the credential's generation and the system's updated_at as
// that same query just returned them. The store gives every PutCredential a generation that
// never repeats and every system update a new updated_at, so a kept signer is used only while
// the rows it was built from are still the ones stored; a deleted credential has no row and is
// refused before the kept signer is looked at. What is kept (signers, and S3 systems' backends
// likewise) is bounded by Config.CredentialCache with a share per owner, dropped when this
// instance deletes or replaces the system or its credential (Forget), and dropped elsewhere
// once unused for Config.CredentialCacheIdle: losing an entry costs a parse, never an answer,
// since nothing kept is used for rows other than the ones it was built from. The cost of a
// decision is one prepared query (SQLite parses it once per pooled connection; pgx caches it
// per connection) instead of two parsed ones. Operators' switches (disabled users and systems) are the one answer cached
// across requests: this instance sees a switch at once, others within Config.DisabledCacheTTL.
package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/slot"
	"github.com/sshapi/sshapi/internal/store"
)

// Errors wrapped by an *Error; the API maps them to statuses.
var (
	// ErrUnusable: the system cannot be reached as configured (no credential, a jump chain
	// that is too long or broken, a host key policy that cannot apply). Retrying does not help.
	ErrUnusable = errors.New("system unusable")
	// ErrCertificate: the stored credential's SSH certificate is expired or not valid yet.
	ErrCertificate = errors.New("credential certificate not usable")
	// ErrDenied: the caller may see the system but not do this (a path outside its grants,
	// write with a read grant, a command on a shared system).
	ErrDenied = errors.New("access denied")
	// ErrDisabled: an operator disabled the system or its owner.
	ErrDisabled = errors.New("disabled by an operator")
)

// Error is a refusal with a message safe for the caller.
type Error struct {
	Kind   error
	Detail string
}

func (e *Error) Error() string { return e.Detail }

// Unwrap returns the kind.
func (e *Error) Unwrap() error { return e.Kind }

func refuse(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// FieldError is a system definition refused because of one field.
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Config tunes links and the audit.
type Config struct {
	// LinkDefaultTTL is a link's lifetime when expires_in_s is not given (default 7 days).
	LinkDefaultTTL time.Duration `yaml:"link_default_ttl" env:"LINK_DEFAULT_TTL"`
	// LinkMaxTTL caps a link's lifetime (default 30 days).
	LinkMaxTTL time.Duration `yaml:"link_max_ttl" env:"LINK_MAX_TTL"`
	// AuditRetention is how long audit entries are kept (default 90 days; negative keeps
	// them forever).
	AuditRetention time.Duration `yaml:"audit_retention" env:"AUDIT_RETENTION"`
	// MaxGrantsPerSystem and MaxLinksPerSystem bound what one owner may create (default 1000).
	MaxGrantsPerSystem int `yaml:"max_grants_per_system" env:"MAX_GRANTS_PER_SYSTEM"`
	MaxLinksPerSystem  int `yaml:"max_links_per_system" env:"MAX_LINKS_PER_SYSTEM"`
	// AuditQueue bounds the audit entries waiting for the batch writer (default 4096); when it
	// is full a request writes its own entry.
	AuditQueue int `yaml:"audit_queue" env:"AUDIT_QUEUE"`
	// AuditCommitDelay is how long the batch writer may wait, holding entries, for the entries
	// of other audited requests still running, so that they share one commit (PostgreSQL's
	// commit_delay with commit_siblings). It waits only while more audited requests are running
	// than it holds entries for (never for a lone request), and commits as soon as it holds an
	// entry for each. Default 2ms; negative: never wait.
	AuditCommitDelay time.Duration `yaml:"audit_commit_delay" env:"AUDIT_COMMIT_DELAY"`
	// DisabledCacheTTL is how long an operator's switch may take to reach other instances
	// (default 1s; this instance sees it at once).
	DisabledCacheTTL time.Duration `yaml:"disabled_cache_ttl" env:"DISABLED_CACHE_TTL"`
	// CredentialCache bounds the systems whose credential the resolver keeps parsed (an SSH
	// system's signer, an S3 system's backend), so that a request does not decrypt and parse
	// it again (default 4096). CredentialCachePerOwner is one owner's share of them (default
	// 256): an owner past it replaces its own least recently used entry, and a full cache
	// gives way from the owner holding the most, so one owner cycling through systems never
	// empties the cache for the others. Either bound only costs a parse when it is hit.
	CredentialCache         int `yaml:"credential_cache" env:"CREDENTIAL_CACHE"`
	CredentialCachePerOwner int `yaml:"credential_cache_per_owner" env:"CREDENTIAL_CACHE_PER_OWNER"`
	// CredentialCacheIdle drops a kept credential unused this long (default 15m; swept from
	// Start until Stop), so a system or credential deleted on another instance leaves no parsed
	// key behind here; this instance drops its own deletions at once (Forget).
	CredentialCacheIdle time.Duration `yaml:"credential_cache_idle" env:"CREDENTIAL_CACHE_IDLE"`
	// Guard bounds the waits of the guard that orders grantees' and link holders' operations
	// on an owner's files (see package guard).
	Guard guard.Config `yaml:"guard" envPrefix:"GUARD_"`
	// S3 tunes how S3 systems are reached (per-owner request bound, CA bundle, upload parts).
	// It is configured at the top level (s3: in the file, SSHAPI_S3_* in the environment) and
	// handed in by the service.
	S3 S3Config `yaml:"-" env:"-"`
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.LinkDefaultTTL <= 0 {
		c.LinkDefaultTTL = 7 * 24 * time.Hour
	}
	if c.LinkMaxTTL <= 0 {
		c.LinkMaxTTL = 30 * 24 * time.Hour
	}
	c.LinkDefaultTTL = min(c.LinkDefaultTTL, c.LinkMaxTTL)
	if c.AuditRetention == 0 {
		c.AuditRetention = 90 * 24 * time.Hour
	}
	if c.MaxGrantsPerSystem <= 0 {
		c.MaxGrantsPerSystem = 1000
	}
	if c.MaxLinksPerSystem <= 0 {
		c.MaxLinksPerSystem = 1000
	}
	if c.AuditQueue <= 0 {
		c.AuditQueue = 4096
	}
	if c.AuditCommitDelay == 0 {
		c.AuditCommitDelay = 2 * time.Millisecond
	}
	if c.DisabledCacheTTL <= 0 {
		c.DisabledCacheTTL = time.Second
	}
	if c.CredentialCache <= 0 {
		c.CredentialCache = 4096
	}
	if c.CredentialCachePerOwner <= 0 {
		c.CredentialCachePerOwner = 256
	}
	c.CredentialCachePerOwner = min(c.CredentialCachePerOwner, c.CredentialCache)
	if c.CredentialCacheIdle <= 0 {
		c.CredentialCacheIdle = 15 * time.Minute
	}
	c.Guard = c.Guard.WithDefaults()
	c.S3 = c.S3.WithDefaults()
	return c
}

// Deps are the resolver's collaborators.
type Deps struct {
	Store   store.Store
	Keyring *secret.Keyring
	// Network refuses system hosts the operator's network policy denies (nil: none).
	Network *netpolicy.Policy
	Log     *slog.Logger
	// Guard orders grantees' and link holders' operations on an owner's files (see package
	// guard); nil builds a single-instance one from Config.Guard.
	Guard *guard.Guard
}

// Resolver resolves access. It is safe for concurrent use.
type Resolver struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	// derived keeps SSH systems' targets (parsed signers, so keys are decrypted once) and S3
	// systems' backends, bounded (Config.CredentialCache); s3Slots bounds each owner's S3
	// requests in flight; s3Client is the HTTP client every backend shares.
	derived  *derivedCache
	s3Slots  *slot.Pool
	s3Once   sync.Once
	s3Client *http.Client
	s3Err    error
	groups   groupMemory

	stop context.CancelFunc // audit retention (Start/Stop)
	done chan struct{}

	auditMu   sync.RWMutex
	auditQ    chan auditItem // nil until Start
	auditDone chan struct{}
	// auditing counts the audited requests that have started and not yet recorded their
	// entry (AuditStarted, AuditEnded): the entries the batch writer may still expect.
	auditing atomic.Int64

	disabled disabledCache
}

// New returns a Resolver.
func New(cfg Config, d Deps) *Resolver {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	if d.Guard == nil {
		d.Guard = guard.New(cfg.Guard, nil)
	}
	return &Resolver{cfg: cfg, deps: d, log: d.Log,
		derived: newDerivedCache(cfg.CredentialCache, cfg.CredentialCachePerOwner),
		s3Slots: slot.New(int64(cfg.S3.MaxRequests), int64(cfg.S3.MaxRequestsPerOwner)),
	}
}

// Forget drops what the resolver keeps of owner's system id (its parsed credential). The API
// calls it once the system or its credential is deleted or replaced; other instances sharing the database
// never use what they keep for a deleted row (see "Concurrency" in the package doc) and drop it
// once it has been idle for Config.CredentialCacheIdle.
func (r *Resolver) Forget(owner, id string) { r.derived.forget(owner, id) }

// Config returns the resolver's configuration, defaults filled.
func (r *Resolver) Config() Config { return r.cfg }
