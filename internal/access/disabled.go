package access

import (
	"context"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// maxDisabledCache bounds the remembered answers; the cache is emptied when full.
const maxDisabledCache = 65536

// disabledCache remembers IsDisabled answers for Config.DisabledCacheTTL, so a request does not
// ask the store each time. This instance's own switches clear it (Invalidate).
type disabledCache struct {
	mu sync.Mutex
	m  map[store.DisabledParams]disabledAnswer
}

type disabledAnswer struct {
	off bool
	at  time.Time
}

// isDisabled answers from the cache or the store.
func (r *Resolver) isDisabled(ctx context.Context, owner, id string) (bool, error) {
	k := store.DisabledParams{Owner: owner, SystemID: id}
	now := time.Now()
	c := &r.disabled
	c.mu.Lock()
	a, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Sub(a.at) < r.cfg.DisabledCacheTTL {
		return a.off, nil
	}
	off, err := r.deps.Store.IsDisabled(ctx, &k)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxDisabledCache {
		c.m = map[store.DisabledParams]disabledAnswer{}
	}
	c.m[k] = disabledAnswer{off: off, at: now}
	c.mu.Unlock()
	return off, nil
}

// forgetDisabled drops the cached answers for users caller and owner and owner's system id, so
// the next decision asks the store.
func (r *Resolver) forgetDisabled(caller, owner, id string) {
	c := &r.disabled
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range []store.DisabledParams{{Owner: caller}, {Owner: owner}, {Owner: owner, SystemID: id}} {
		delete(c.m, k)
	}
}

// SetDisabled switches a user or system off or on, effective at once on this instance (and
// within Config.DisabledCacheTTL on others).
func (r *Resolver) SetDisabled(ctx context.Context, p *store.DisabledParams) error {
	if err := r.deps.Store.SetDisabled(ctx, p); err != nil {
		return err
	}
	r.disabled.mu.Lock()
	r.disabled.m = nil
	r.disabled.mu.Unlock()
	return nil
}
