package access

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/transfer"
)

// maxRememberedGroups bounds the users whose groups the resolver remembers for transfers.
const maxRememberedGroups = 65536

// groupMemory remembers each user's groups as last seen in a token, so a transfer running in
// the background judges group grants as its owner's last request did.
type groupMemory struct {
	mu sync.Mutex
	m  map[string][]string
}

func (g *groupMemory) remember(p auth.Principal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil || len(g.m) >= maxRememberedGroups {
		g.m = map[string][]string{}
	}
	g.m[p.User] = p.Groups
}

func (g *groupMemory) principal(user string) auth.Principal {
	g.mu.Lock()
	defer g.mu.Unlock()
	return auth.Principal{User: user, Groups: g.m[user]}
}

// Remember records the caller's groups for its transfers (called by the API per request).
func (r *Resolver) Remember(p auth.Principal) {
	if len(p.Groups) > 0 {
		r.groups.remember(p)
	}
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
	req := Request{Caller: r.groups.principal(owner), System: ep.System, Level: level}
	if withPath {
		req.Paths = []string{ep.Path}
	}
	d, err := r.decideTransfer(ctx, req, withPath)
	if err != nil {
		return transfer.System{}, err
	}
	sys := transfer.System{Target: d.Target, RootDir: d.System.RootDir, Within: d.Within}
	if d.Shared() {
		sys.Recheck = func(ctx context.Context) error {
			_, err := r.decideTransfer(ctx, req, withPath)
			return err
		}
	}
	return sys, nil
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
