package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrLimit is wrapped by the error of a create refused because the system already has the
// most grants or links the caller allows (GrantCreateParams.Max, LinkCreateParams.Max), or the
// owner the most systems (SystemCreateParams.Max).
var ErrLimit = errors.New("store: limit reached")

// LimitError is the error of a create refused by its Max; it wraps ErrLimit and reads
// `system "hpc" already has 1000 grants (the limit)`.
type LimitError struct {
	// SystemID is the system that is full; What is "grants" or "links". For an owner's
	// systems SystemID is empty, Owner names the owner and What is "systems".
	SystemID, What string
	Owner          string
	// Max is the limit the create was given.
	Max int
}

func (e *LimitError) Error() string {
	if e.SystemID == "" {
		return fmt.Sprintf("user %q already has %d %s (the limit)", e.Owner, e.Max, e.What)
	}
	return fmt.Sprintf("system %q already has %d %s (the limit)", e.SystemID, e.Max, e.What)
}

// Unwrap makes errors.Is(err, ErrLimit) hold.
func (e *LimitError) Unwrap() error { return ErrLimit }

// Grant lets a principal use part of an owner's system through the owner's credential.
type Grant struct {
	// ID is set by the store.
	ID string
	// Owner and SystemID name the shared system.
	Owner, SystemID string
	// Principal is "user:NAME", "group:NAME" or "authenticated".
	Principal string
	// Path is the absolute, clean directory (or file) granted, with everything under it.
	Path string
	// Access is "read" or "write" (write implies read).
	Access string
	// ExpiresAt, if not zero, ends the grant.
	ExpiresAt time.Time
	// CreatedAt is set by the store.
	CreatedAt time.Time
}

// Link is a pre-authenticated URL to one path of an owner's system. Only a hash of its secret
// is stored.
type Link struct {
	// ID is public (it appears in the URL and the audit); set by the caller.
	ID string
	// Owner and SystemID name the system; CreatedBy is who made the link (the owner).
	Owner, SystemID string
	// Path is the absolute, clean path the link serves.
	Path string
	// Access is "read" or "write".
	Access string
	// SecretHash is the SHA-256 of the link's secret.
	SecretHash []byte
	// ExpiresAt ends the link.
	ExpiresAt time.Time
	// MaxUses bounds the requests the link serves (0: unbounded); Uses counts them.
	MaxUses, Uses int64
	// CreatedAt is set by the store.
	CreatedAt time.Time
}

// GrantCreateParams creates a grant; the store sets ID and CreatedAt on Grant.
type GrantCreateParams struct {
	Grant *Grant
	// Max, when > 0, refuses the grant (a *LimitError) if the system already has Max grants.
	// The count and the insert are atomic: concurrent creates, on any number of instances
	// sharing the database, never leave more than Max.
	Max int
}

// GrantListParams selects one system's grants (Owner and SystemID), or, with SystemID empty
// and Principals set, every unexpired grant to any of Principals across owners.
type GrantListParams struct {
	Owner, SystemID string
	Principals      []string
	// Now excludes grants expired by then (zero: include them).
	Now time.Time
}

// GrantDeleteParams deletes one grant of a system.
type GrantDeleteParams struct{ Owner, SystemID, ID string }

// LinkCreateParams creates a link; the store sets CreatedAt.
type LinkCreateParams struct {
	Link *Link
	// Max, when > 0, refuses the link (a *LimitError) if the system already has Max links,
	// atomically as GrantCreateParams.Max.
	Max int
}

// LinkListParams lists one system's links.
type LinkListParams struct{ Owner, SystemID string }

// LinkDeleteParams revokes (deletes) one link of a system.
type LinkDeleteParams struct{ Owner, SystemID, ID string }

// LinkUseParams counts one use of link ID, only while it is unexpired at Now and below its
// MaxUses; otherwise ErrNotFound.
type LinkUseParams struct {
	ID  string
	Now time.Time
}

// LinkGetParams reads link ID (whatever its state).
type LinkGetParams struct{ ID string }

// AuditQueryParams selects audit entries, newest first. Visible, when set, keeps the entries
// that user made or that were made on systems the user owns. The other filters narrow.
type AuditQueryParams struct {
	Visible      string
	Principal    string
	SystemOwner  string
	System       string
	PathPrefix   string
	Since, Until time.Time
	// BeforeSeq pages: only entries with Seq < BeforeSeq (0: from the newest).
	BeforeSeq int64
	// Limit bounds the page (<= 0: DefaultAuditLimit).
	Limit int
}

// AuditPurgeParams deletes entries older than Before.
type AuditPurgeParams struct{ Before time.Time }

// DisabledParams names a disabled system (Owner and SystemID) or user (Owner alone).
type DisabledParams struct {
	Owner, SystemID string
	// Disabled is the new state (SetDisabled only).
	Disabled bool
}

// UserGroupsParams records (Put) or reads (Get) the groups a user's token last carried, so a
// transfer judged on another instance sees the same group grants.
type UserGroupsParams struct {
	User   string
	Groups []string
}

// AccessStampParams names the facts a decision on Owner's system SystemID for Caller relied on:
// the system, its credential, the operator's switches of Caller, Owner and the system, the
// groups last recorded for Caller (PutUserGroups), and (for a grantee) GrantID, judged
// unexpired at Now.
type AccessStampParams struct {
	Owner, SystemID, Caller string
	GrantID                 string // "" for the owner's own decision
	Now                     time.Time
}

// AccessStamp is a snapshot of what AccessStampParams names, read in one query. Any change that
// can withdraw access (a system deleted or changed, a credential replaced or removed, a grant
// revoked or expired, a user or system disabled, the caller's groups changed) changes the
// stamp, so a decision made after an equal stamp was read still holds.
type AccessStamp struct {
	// SystemUpdated is the system's UpdatedAt in Unix microseconds, 0 when it is gone.
	SystemUpdated int64
	// CredentialGeneration is the credential's generation, 0 when there is none.
	CredentialGeneration int64
	// GrantLive reports that GrantID exists on the system and has not expired.
	GrantLive bool
	// Disabled reports that Caller, Owner or the system is disabled.
	Disabled bool
	// CallerGroups are the groups last recorded for Caller, as a JSON array of strings; ""
	// when none were ever recorded. A decision judges group grants by them.
	CallerGroups string
}

// AuditAppendParams appends entries in one transaction (times set where zero).
type AuditAppendParams struct{ Entries []AuditEntry }

// AccessStore persists grants, links, the provenance audit and operator switches. Methods
// follow River's style: (ctx, *Params).
type AccessStore interface {
	// CreateGrant inserts p.Grant (ErrNotFound if the system does not exist, ErrLimit if it
	// has p.Max grants).
	CreateGrant(ctx context.Context, p *GrantCreateParams) error
	// ListGrants returns grants per p, oldest first (never nil).
	ListGrants(ctx context.Context, p *GrantListParams) ([]Grant, error)
	// DeleteGrant deletes one grant, or ErrNotFound.
	DeleteGrant(ctx context.Context, p *GrantDeleteParams) error
	// CreateLink inserts p.Link (ErrNotFound if the system does not exist, ErrLimit if it has
	// p.Max links, ErrConflict on a duplicate ID).
	CreateLink(ctx context.Context, p *LinkCreateParams) error
	// GetLink returns a link, or ErrNotFound.
	GetLink(ctx context.Context, p *LinkGetParams) (*Link, error)
	// ListLinks returns a system's links, oldest first (never nil).
	ListLinks(ctx context.Context, p *LinkListParams) ([]Link, error)
	// DeleteLink deletes a link, or ErrNotFound.
	DeleteLink(ctx context.Context, p *LinkDeleteParams) error
	// UseLink counts one use atomically and returns the link after it, or ErrNotFound when it
	// is missing, expired or exhausted.
	UseLink(ctx context.Context, p *LinkUseParams) (*Link, error)
	// AppendAuditBatch records p.Entries atomically, in order, skipping those whose ID is
	// stored already.
	AppendAuditBatch(ctx context.Context, p *AuditAppendParams) error
	// QueryAudit returns audit entries per p.
	QueryAudit(ctx context.Context, p *AuditQueryParams) ([]AuditEntry, error)
	// PurgeAudit deletes old entries and returns how many.
	PurgeAudit(ctx context.Context, p *AuditPurgeParams) (int64, error)
	// SetDisabled disables or re-enables a user or a system.
	SetDisabled(ctx context.Context, p *DisabledParams) error
	// IsDisabled reports whether the user, or (with SystemID) the system, is disabled.
	IsDisabled(ctx context.Context, p *DisabledParams) (bool, error)
	// AccessStamp reads, in one query, what a decision on p's system relied on.
	AccessStamp(ctx context.Context, p *AccessStampParams) (AccessStamp, error)
	// ListAllSystems returns every owner's systems (operators), sorted by owner and ID.
	ListAllSystems(ctx context.Context) ([]System, error)
	// PutUserGroups records p.Groups as p.User's groups.
	PutUserGroups(ctx context.Context, p *UserGroupsParams) error
	// GetUserGroups returns p.User's recorded groups (nil when none were recorded).
	GetUserGroups(ctx context.Context, p *UserGroupsParams) ([]string, error)
}
