package access

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/transfer"
)

// maxRememberedGroups bounds the users whose groups the resolver keeps in memory.
const maxRememberedGroups = 65536

// groupMemory remembers each user's groups as last seen in a token, so a transfer running in
// the background judges group grants as its owner's last request did. The store holds them too
// (written only when they change), for transfers that run on another instance.
type groupMemory struct {
	mu sync.Mutex
	m  map[string][]string
}

// changed records groups for user and reports whether they differ from what was known.
func (g *groupMemory) changed(user string, groups []string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	old, ok := g.m[user]
	if ok && slices.Equal(old, groups) {
		return false
	}
	if g.m == nil || len(g.m) >= maxRememberedGroups {
		g.m = map[string][]string{}
	}
	g.m[user] = slices.Clone(groups)
	return true
}

func (g *groupMemory) get(user string) ([]string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.m[user]
	return v, ok
}

// Remember records the caller's groups for its transfers (the API calls it per request; the
// store is written only when they change).
func (r *Resolver) Remember(ctx context.Context, p auth.Principal) {
	if !r.groups.changed(p.User, p.Groups) {
		return
	}
	if err := r.deps.Store.PutUserGroups(ctx, &store.UserGroupsParams{User: p.User, Groups: p.Groups}); err != nil {
		r.log.Warn("record the caller's groups", "user", p.User, "err", err)
	}
}

// principal is user with the groups last recorded for them.
func (r *Resolver) principal(ctx context.Context, user string) (auth.Principal, error) {
	if g, ok := r.groups.get(user); ok {
		return auth.Principal{User: user, Groups: g}, nil
	}
	g, err := r.deps.Store.GetUserGroups(ctx, &store.UserGroupsParams{User: user})
	if err != nil {
		return auth.Principal{}, err
	}
	r.groups.changed(user, g)
	return auth.Principal{User: user, Groups: g}, nil
}

// Resolve implements transfer.Resolver: owner's own system, or a shared one named
// "{owner}:{id}" (allowed by any write grant, for cleaning up temporary files).
func (r *Resolver) ResolveTransfer(ctx context.Context, owner, ref string) (transfer.System, error) {
	return r.resolveTransfer(ctx, owner, transfer.Endpoint{System: ref}, Write, false)
}

// ResolveEndpoint implements transfer.EndpointResolver: the system with the caller's grant on
// the endpoint's path as a further root, and a Recheck that asks again (revocation stops a
// running transfer at its next range).
func (r *Resolver) ResolveEndpoint(ctx context.Context, owner string, ep transfer.Endpoint, write bool) (transfer.System, error) {
	level := Read
	if write {
		level = Write
	}
	return r.resolveTransfer(ctx, owner, ep, level, true)
}

func (r *Resolver) resolveTransfer(ctx context.Context, owner string, ep transfer.Endpoint, level Level, withPath bool) (transfer.System, error) {
	caller, err := r.principal(ctx, owner)
	if err != nil {
		return transfer.System{}, err
	}
	req := Request{Caller: caller, System: ep.System, Level: level}
	if withPath {
		req.Paths = []string{ep.Path}
	}
	d, err := r.decideTransfer(ctx, req, withPath)
	if err != nil {
		return transfer.System{}, err
	}
	// Every round and range asks again: a revoked grant, or a system or user an operator
	// disabled, stops the transfer there.
	rc := &recheck{r: r, req: req, withPath: withPath}
	// An S3 system's endpoint is its bucket (d.Storage, already rooted at its prefix); the
	// engine moves data through it instead of an SSH target.
	sys := transfer.System{Target: d.Target, Storage: d.Storage, RootDir: d.System.RootDir, Within: d.Within, Recheck: rc.check}
	if d.Shared() {
		sys.HoldKey = d.Owner
		sys.Hold = func(ctx context.Context) (context.Context, func(), error) { return d.Hold(ctx, false) }
	}
	return sys, nil
}

// recheck is the Recheck of one resolved transfer endpoint, asked before every round, chunk,
// batch of small files and range.
// A full decision costs several store reads (the operator's switches, the grants, the system
// and its credential); instead it keeps its last allowing decision and validates it with one
// query, Store.AccessStamp, which reads everything the decision relied on. The stamp is read
// before the decision it validates, so a change made while deciding is seen at the next check;
// any change (a grant revoked or expired, a user or system disabled, the system or its
// credential changed or deleted, the caller's recorded groups changed) makes the stamps differ
// and the next check decides in full, with the caller's groups as the stamp read them, so
// revocation (leaving a group included) still stops the transfer at its next range, on any
// instance. Systems behind a jump host are decided in full every time (the stamp does not
// cover the jump chain).
type recheck struct {
	r        *Resolver
	req      Request
	withPath bool

	mu     sync.Mutex
	params store.AccessStampParams
	stamp  *store.AccessStamp // read before the last allowing decision; nil: decide in full
}

// check implements transfer.System.Recheck.
func (c *recheck) check(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.params.SystemID == "" {
		owner, id, err := ParseRef(c.req.Caller.User, c.req.System)
		if err != nil {
			return transferErr(c.req.System, err)
		}
		c.params = store.AccessStampParams{Owner: owner, SystemID: id, Caller: c.req.Caller.User}
	}
	c.params.Now = time.Now()
	st, err := c.r.deps.Store.AccessStamp(ctx, &c.params)
	if err != nil {
		return fmt.Errorf("access check: %w", err)
	}
	if c.stamp != nil && st == *c.stamp {
		return nil
	}
	c.stamp = nil
	// Group grants are judged by the groups the caller's last request carried, on whichever
	// instance it came (the store has them), not by those of the request that started the
	// transfer: a group left since lends its grants no longer.
	if st.CallerGroups != "" {
		var groups []string
		if err := json.Unmarshal([]byte(st.CallerGroups), &groups); err != nil {
			return fmt.Errorf("access check: the caller's groups: %w", err)
		}
		if len(groups) == 0 {
			groups = nil
		}
		c.req.Caller.Groups = groups
		c.r.groups.changed(c.req.Caller.User, groups)
	}
	if st.Disabled {
		// The stamp is fresher than this instance's cache of the operator's switches (another
		// instance may have switched): decide on the store's answer.
		c.r.forgetDisabled(c.params.Caller, c.params.Owner, c.params.SystemID)
	}
	d, err := c.r.decideTransfer(ctx, c.req, c.withPath)
	if err != nil {
		return err
	}
	grant := ""
	if d.Grant != nil {
		grant = d.Grant.ID
	}
	// The stamp validates this decision only if it was read for the grant that allowed it and
	// itself shows access; otherwise the next check decides in full again.
	usable := !st.Disabled && st.SystemUpdated != 0 && st.CredentialGeneration != 0 && (grant == "" || st.GrantLive)
	if usable && d.Target.Jump == nil && grant == c.params.GrantID {
		c.stamp = &st
	}
	c.params.GrantID = grant
	return nil
}

// decideTransfer is Resolve with errors the engine understands: what retrying cannot fix wraps
// transfer.ErrSystem.
func (r *Resolver) decideTransfer(ctx context.Context, req Request, withPath bool) (*Decision, error) {
	if !withPath {
		owner, id, err := ParseRef(req.Caller.User, req.System)
		if err == nil && owner != req.Caller.User {
			// No path: any grant of the level on the system will do (cleanup of temp files).
			req.Paths = nil
			d, err := r.Resolve(ctx, req)
			return d, transferErr(id, err)
		}
	}
	d, err := r.Resolve(ctx, req)
	return d, transferErr(req.System, err)
}

func transferErr(id string, err error) error {
	var ae *Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: system %q no longer exists or is no longer shared with you", transfer.ErrSystem, id)
	case errors.As(err, &ae) && ae.Kind != ErrCertificate:
		return fmt.Errorf("%w: %s", transfer.ErrSystem, ae.Detail)
	}
	return err
}

// TransferResolver returns what the transfer engine uses to reach systems.
func (r *Resolver) TransferResolver() transfer.Resolver { return transferResolver{r} }

type transferResolver struct{ r *Resolver }

func (t transferResolver) Resolve(ctx context.Context, owner, system string) (transfer.System, error) {
	return t.r.ResolveTransfer(ctx, owner, system)
}

func (t transferResolver) ResolveEndpoint(ctx context.Context, owner string, ep transfer.Endpoint, write bool) (transfer.System, error) {
	return t.r.ResolveEndpoint(ctx, owner, ep, write)
}
