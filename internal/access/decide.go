package access

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/store"
)

// Level is the access an operation needs. Levels are ordered: Write includes Read.
type Level int

// The levels. Command is never granted: only the owner runs commands.
const (
	Read Level = iota + 1
	Write
	Command
	// Manage is the owner's own business: the system's definition, credential, grants and
	// links.
	Manage
)

// ParseLevel reads a grant's or link's access ("read" or "write").
func ParseLevel(s string) (Level, bool) {
	switch s {
	case "read":
		return Read, true
	case "write":
		return Write, true
	}
	return 0, false
}

// Principals a grant may name.
const (
	// Authenticated is every signed-in user.
	Authenticated = "authenticated"
	userPrefix    = "user:"
	groupPrefix   = "group:"
)

// Request is what a caller wants.
type Request struct {
	Caller auth.Principal
	// System is the caller's own system id, or "{owner}:{id}" for someone else's (the owner
	// URL-encoded; split at the last colon).
	System string
	Level  Level
	// Paths are the remote paths involved, absolute or relative to the owner's home; on a
	// shared system they must be absolute and inside one grant.
	Paths []string
}

// Decision is how to carry out an allowed request.
type Decision struct {
	// Owner and SystemID name the system; the connection uses the owner's credential.
	Owner, SystemID string
	// Target is how to reach an SSH system (zero for an S3 system).
	Target sshpool.Target
	// Storage is an S3 system's bucket (nil for an SSH system): file operations go through it
	// and nothing else.
	Storage storage.Backend
	System  *store.System
	// Within is the grant's or link's path, a further confinement root inside the system's
	// root_dir; "" for the owner.
	Within string
	// Grant or Link is what allowed a request that is not the owner's.
	Grant *store.Grant
	Link  *store.Link

	guard *guard.Guard // set on shared decisions
	who   string       // the principal the guard counts waiting moves for
}

// Shared reports whether the caller acts on someone else's system.
func (d *Decision) Shared() bool { return d.Grant != nil || d.Link != nil }

// Hold orders a shared decision's file operation against the other principals acting through
// grants and links on the same owner's files (package guard): restructure is true for an
// operation that can put a symlink at a name or rename an entry (move, symlink, copy,
// extract), which then runs alone. The caller holds it from its first path check until it no
// longer relies on the paths it checked, and calls release exactly once. The work relying on
// the hold runs under held (a child of ctx): when the hold is lost (guard.ErrLost: the database
// session holding it across instances ended, so others may restructure meanwhile), held is
// cancelled with that cause and the work must stop, not go on or take the guard again. The
// owner's own operations are not ordered: for them Hold returns ctx at once.
func (d *Decision) Hold(ctx context.Context, restructure bool) (held context.Context, release func(), err error) {
	if !d.Shared() || d.guard == nil {
		return ctx, func() {}, nil
	}
	held, release, err = d.guard.Hold(ctx, d.Owner, d.who, restructure)
	if errors.Is(err, guard.ErrBusy) {
		return nil, nil, refuse(ErrBusy, "another operation on %s's shared files is in progress; retry shortly", d.Owner)
	}
	return held, release, err
}

// ErrBusy: the owner's shared files are being restructured, or walked while a restructuring
// waits, for longer than the guard waits; retrying later helps.
var ErrBusy = errors.New("shared files busy")

// ParseRef splits a system reference: "id" is the caller's own system; "owner:id" another
// user's (owner URL-encoded, split at the last colon).
func ParseRef(caller, ref string) (owner, id string, err error) {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 {
		return caller, ref, nil
	}
	owner, err = url.PathUnescape(ref[:i])
	if err != nil || owner == "" || ref[i+1:] == "" {
		return "", "", refuse(ErrInvalidRef, "system %q: a shared system is named {owner}:{id}, the owner URL-encoded", ref)
	}
	return owner, ref[i+1:], nil
}

// ErrInvalidRef: a malformed "{owner}:{id}".
var ErrInvalidRef = errors.New("invalid system reference")

// Ref is the name under which caller addresses owner's system id.
func Ref(caller, owner, id string) string {
	if owner == caller {
		return id
	}
	return url.PathEscape(owner) + ":" + id
}

// principalsOf are the grant principals that match p.
func principalsOf(p auth.Principal) []string {
	out := []string{userPrefix + p.User, Authenticated}
	for _, g := range p.Groups {
		out = append(out, groupPrefix+g)
	}
	return out
}

// Resolve decides req: the owner may do anything on their system; anyone else needs an
// unexpired grant matching them (as a user, a group member, or any signed-in user) that
// covers every path with at least the level asked. A system the caller has no grant on is
// store.ErrNotFound, as if it did not exist; a refusal on a system they can see is ErrDenied.
func (r *Resolver) Resolve(ctx context.Context, req Request) (*Decision, error) {
	owner, id, err := ParseRef(req.Caller.User, req.System)
	if err != nil {
		return nil, err
	}
	if owner == req.Caller.User {
		if err := r.checkEnabled(ctx, owner, owner, id); err != nil {
			return nil, err
		}
		return r.reach(ctx, owner, id, req.Level)
	}
	if err := r.checkEnabled(ctx, req.Caller.User, req.Caller.User, ""); err != nil {
		return nil, err
	}
	g, err := r.grantFor(ctx, req.Caller, owner, id, req.Level, req.Paths)
	if err != nil {
		return nil, err
	}
	// Only a grantee learns that the system or its owner is switched off.
	if err := r.checkEnabled(ctx, req.Caller.User, owner, id); err != nil {
		return nil, err
	}
	d, err := r.reach(ctx, owner, id, req.Level)
	if err != nil {
		return nil, err
	}
	d.Within, d.Grant, d.guard, d.who = g.Path, g, r.deps.Guard, req.Caller.User
	return d, nil
}

// reach is the part of a decision that says how to reach owner's system id: an SSH target, or
// an S3 system's storage (which has no commands: a Command level is refused naming the
// capability).
func (r *Resolver) reach(ctx context.Context, owner, id string, level Level) (*Decision, error) {
	t, sys, err := r.Target(ctx, owner, id)
	if isNotSSH(err) && sys != nil && level <= Write {
		b, err := r.Storage(ctx, sys)
		if err != nil {
			return nil, err
		}
		return &Decision{Owner: owner, SystemID: id, Storage: b, System: sys}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Decision{Owner: owner, SystemID: id, Target: t, System: sys}, nil
}

// grantFor finds the grant that allows the request.
func (r *Resolver) grantFor(ctx context.Context, caller auth.Principal, owner, id string, level Level, paths []string) (*store.Grant, error) {
	gs, err := r.deps.Store.ListGrants(ctx, &store.GrantListParams{Owner: owner, SystemID: id, Now: time.Now()})
	if err != nil {
		return nil, err
	}
	mine := principalsOf(caller)
	var matching []store.Grant
	for _, g := range gs {
		for _, p := range mine {
			if g.Principal == p {
				matching = append(matching, g)
				break
			}
		}
	}
	if len(matching) == 0 {
		return nil, fmt.Errorf("system %q: %w", id, store.ErrNotFound)
	}
	if level > Write {
		return nil, refuse(ErrDenied, "system %s:%s is shared with you for file access only: commands and its definition are the owner's", owner, id)
	}
	clean := make([]string, 0, len(paths))
	for _, p := range paths {
		if !strings.HasPrefix(p, "/") {
			return nil, refuse(ErrDenied, "on a shared system, paths must be absolute and inside a granted path (%s)", grantedPaths(matching))
		}
		clean = append(clean, path.Clean(p))
	}
	var readOnly bool
	for i := range matching {
		g := &matching[i]
		if !covers(g.Path, clean) {
			continue
		}
		if lv, _ := ParseLevel(g.Access); lv >= level {
			return g, nil
		}
		readOnly = true
	}
	if readOnly {
		return nil, refuse(ErrDenied, "your grant on %s:%s is read-only here", owner, id)
	}
	return nil, refuse(ErrDenied, "outside the paths shared with you on %s:%s (%s)", owner, id, grantedPaths(matching))
}

func covers(root string, paths []string) bool {
	for _, p := range paths {
		if !confine.Within(root, p) {
			return false
		}
	}
	return true
}

func grantedPaths(gs []store.Grant) string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Path+" "+g.Access)
	}
	return strings.Join(out, ", ")
}

// CheckEnabled refuses a caller an operator disabled and, when ref names one of the caller's
// own systems ("id"), that system; "" checks the caller alone. Another's system
// ("{owner}:{id}") is left to Resolve, which judges it after the grant, so a caller without one
// learns nothing of it. The API asks this once per authenticated request, before any handler:
// every route of a disabled user or system is refused, management routes included. Answers are
// cached for Config.DisabledCacheTTL.
func (r *Resolver) CheckEnabled(ctx context.Context, caller, ref string) error {
	if ref != "" && !strings.ContainsRune(ref, ':') {
		return r.checkEnabled(ctx, caller, caller, ref)
	}
	return r.checkEnabled(ctx, caller, caller, "")
}

// checkEnabled refuses a caller, owner or system an operator disabled, saying which switch is
// off.
func (r *Resolver) checkEnabled(ctx context.Context, caller, owner, id string) error {
	if caller != "" && caller != owner {
		off, err := r.isDisabled(ctx, caller, "")
		if err != nil {
			return err
		}
		if off {
			return refuse(ErrDisabled, "your user %q is disabled by an operator", caller)
		}
	}
	off, err := r.isDisabled(ctx, owner, "")
	if err != nil {
		return err
	}
	switch {
	case off && owner == caller:
		return refuse(ErrDisabled, "your user %q is disabled by an operator", caller)
	case off:
		return refuse(ErrDisabled, "user %q, the owner of system %q, is disabled by an operator", owner, Ref(caller, owner, id))
	case id == "":
		return nil
	}
	if off, err = r.isDisabled(ctx, owner, id); err != nil {
		return err
	}
	if off {
		return refuse(ErrDisabled, "system %q is disabled by an operator", Ref(caller, owner, id))
	}
	return nil
}

// Shared lists the systems shared with the caller: each with its owner and the grants.
func (r *Resolver) Shared(ctx context.Context, caller auth.Principal) ([]store.Grant, error) {
	gs, err := r.deps.Store.ListGrants(ctx, &store.GrantListParams{Principals: principalsOf(caller), Now: time.Now()})
	if err != nil {
		return nil, err
	}
	out := gs[:0]
	for _, g := range gs {
		if g.Owner != caller.User {
			out = append(out, g)
		}
	}
	return out, nil
}
