package store

import (
	"context"
	"time"
)

// Session is a signed-in browser session of the web interface. The browser holds an opaque
// random id in a cookie; the store keeps only its SHA-256 (IDHash), so a copy of the database
// cannot be replayed as cookies.
type Session struct {
	// IDHash is the SHA-256 of the session id the cookie carries.
	IDHash []byte
	// User is the principal's user (the identity provider's subject).
	User string
	// Groups are the principal's groups (the ID token's groups claim) for group grants.
	Groups []string
	// CreatedAt is set by CreateSession.
	CreatedAt time.Time
	// LastSeenAt is when the session was last used (for the idle expiry); CreateSession sets
	// it to CreatedAt.
	LastSeenAt time.Time
	// ExpiresAt is the absolute expiry, whatever the activity.
	ExpiresAt time.Time
}

// LoginFlow is a pending sign-in that any instance may complete once: an OpenID Connect
// authorization request (keyed by the hash of its state) or a one-time development login
// link (keyed by the hash of its secret).
type LoginFlow struct {
	// KeyHash is the SHA-256 of the state or link secret.
	KeyHash []byte
	// Kind says what the flow is ("oidc", "link").
	Kind string
	// User is the user a login link signs in; empty for "oidc".
	User string
	// Data is the flow's private data (PKCE verifier, nonce, where to go afterwards), opaque
	// to the store.
	Data []byte
	// ExpiresAt is when the flow can no longer be completed.
	ExpiresAt time.Time
}

// SessionParams are the arguments of CreateSession.
type SessionParams struct {
	// Session is stored; its CreatedAt and LastSeenAt are set.
	Session *Session
	// MaxPerUser bounds the user's sessions: the oldest ones beyond it are deleted in the same
	// transaction. 0 means no bound.
	MaxPerUser int
}

// SessionStore keeps the web interface's sessions and pending sign-ins. Expired rows are
// never returned; DeleteExpiredSessions removes them.
type SessionStore interface {
	// CreateSession inserts p.Session, setting its CreatedAt and LastSeenAt, and deletes the
	// user's oldest sessions beyond p.MaxPerUser. ErrConflict if the hash exists.
	CreateSession(ctx context.Context, p *SessionParams) error
	// GetSession returns the session whose id hashes to idHash, unless it expired before now
	// (absolutely, or because it was last seen before idleSince): ErrNotFound.
	GetSession(ctx context.Context, idHash []byte, now, idleSince time.Time) (*Session, error)
	// TouchSession sets the session's LastSeenAt to at (never moving it back).
	TouchSession(ctx context.Context, idHash []byte, at time.Time) error
	// DeleteSession removes the session (sign-out); no error if it does not exist.
	DeleteSession(ctx context.Context, idHash []byte) error
	// DeleteUserSessions removes every session of user and returns how many.
	DeleteUserSessions(ctx context.Context, user string) (int64, error)
	// DeleteExpiredSessions removes sessions expired before now or idle since idleSince, and
	// login flows expired before now; it returns how many rows went.
	DeleteExpiredSessions(ctx context.Context, now, idleSince time.Time) (int64, error)
	// CreateLoginFlow inserts f. ErrConflict if the hash exists.
	CreateLoginFlow(ctx context.Context, f *LoginFlow) error
	// TakeLoginFlow deletes and returns the flow keyed by keyHash of the given kind, in one
	// step, so that it is completed at most once across instances. ErrNotFound if there is
	// none, it is of another kind, or it expired before now.
	TakeLoginFlow(ctx context.Context, keyHash []byte, kind string, now time.Time) (*LoginFlow, error)
}
