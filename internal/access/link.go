package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
)

// linkIDPrefix starts every link id; a token is "<id>.<secret>".
const linkIDPrefix = "l_"

// NewLink makes a link to owner's path on system id and returns it with its token, the only
// time the token exists outside the caller's hands (only its hash is stored). A system that
// already has Config.MaxLinksPerSystem links gets none (store.ErrLimit, checked atomically by
// the store).
func (r *Resolver) NewLink(ctx context.Context, owner, id, p string, level Level, expires time.Time, maxUses int64) (*store.Link, string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, "", &FieldError{Field: "path", Message: "must be absolute"}
	}
	secret := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(secret))
	l := &store.Link{ID: linkIDPrefix + strings.ToLower(rand.Text()[:16]), Owner: owner, SystemID: id, Path: path.Clean(p),
		Access: levelName(level), SecretHash: sum[:], ExpiresAt: expires, MaxUses: maxUses}
	if err := r.deps.Store.CreateLink(ctx, &store.LinkCreateParams{Link: l, Max: r.cfg.MaxLinksPerSystem}); err != nil {
		return nil, "", err
	}
	return l, l.ID + "." + secret, nil
}

func levelName(l Level) string {
	if l == Write {
		return "write"
	}
	return "read"
}

// LinkID returns the id part of a token (for logs and the audit), or "".
func LinkID(token string) string {
	id, _, ok := strings.Cut(token, ".")
	if !ok || !strings.HasPrefix(id, linkIDPrefix) || len(id) > 64 {
		return ""
	}
	return id
}

// ResolveLink decides a request made with a link token: the token must match a link that is
// unexpired, not exhausted and not revoked, whose access covers level; each call counts one
// use. Every refusal is store.ErrNotFound, so a link's existence is not revealed.
func (r *Resolver) ResolveLink(ctx context.Context, token string, level Level) (*Decision, error) {
	notFound := fmt.Errorf("link: %w", store.ErrNotFound)
	l, err := r.LinkOf(ctx, token)
	if err != nil {
		return nil, err
	}
	id := l.ID
	if lv, _ := ParseLevel(l.Access); lv < level {
		return nil, refuse(ErrDenied, "this link is read-only")
	}
	if err := r.checkEnabled(ctx, "", l.Owner, l.SystemID); err != nil {
		return nil, err
	}
	if l, err = r.deps.Store.UseLink(ctx, &store.LinkUseParams{ID: id, Now: time.Now()}); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound
		}
		return nil, err
	}
	d, err := r.reach(ctx, l.Owner, l.SystemID, level)
	if err != nil {
		return nil, err
	}
	d.Within, d.Link, d.guard, d.who = l.Path, l, r.deps.Guard, auth.LinkPrincipalPrefix+l.ID
	return d, nil
}

// LinkOf returns the link a token belongs to, whatever its state, when the token's secret
// matches (store.ErrNotFound otherwise). It decides nothing: ResolveLink does.
func (r *Resolver) LinkOf(ctx context.Context, token string) (*store.Link, error) {
	notFound := fmt.Errorf("link: %w", store.ErrNotFound)
	id := LinkID(token)
	if id == "" {
		return nil, notFound
	}
	l, err := r.deps.Store.GetLink(ctx, &store.LinkGetParams{ID: id})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(token[len(id)+1:]))
	if subtle.ConstantTimeCompare(sum[:], l.SecretHash) != 1 {
		return nil, notFound
	}
	return l, nil
}
