package access

import (
	"sync"
	"time"
)

// derivedCache keeps the work derived from systems' credentials: an SSH system's connection
// target (the signer parsed from the decrypted key) or an S3 system's storage backend, one per
// system, valid for the credential generation and system version it was built from (see
// "Concurrency" in the package doc: a version that no longer matches is a miss, and correctness
// never depends on what is kept). It is bounded by construction: at most max entries, of which
// one owner holds at most perOwner (an owner at its share replaces its own least recently used
// entry; a full cache evicts the least recently used entry of the owner holding the most, so
// an owner with few entries keeps them however many systems another churns through), and
// entries not used for a while are dropped by the resolver's sweep (Start), so a system
// deleted on another instance is forgotten here too. It is safe for concurrent use.
type derivedCache struct {
	max, perOwner int

	mu     sync.Mutex
	owners map[string]map[string]*derived // owner -> system id -> entry
	n      int                            // entries over all owners
}

// derived is one system's kept work.
type derived struct {
	generation int64
	updated    time.Time
	val        any
	used       time.Time
}

// newDerivedCache returns a cache of at most capacity entries, share of them per owner (a share
// outside 1…capacity is clamped into it).
func newDerivedCache(capacity, share int) *derivedCache {
	capacity = max(capacity, 1)
	return &derivedCache{max: capacity, perOwner: min(max(share, 1), capacity), owners: map[string]map[string]*derived{}}
}

// get returns what is kept for k's system if it was built from k's versions.
func (c *derivedCache) get(k targetKey, now time.Time) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.owners[k.owner][k.system]
	if e == nil || e.generation != k.generation || !e.updated.Equal(k.updated) {
		return nil, false
	}
	e.used = now
	return e.val, true
}

// put keeps v for k's system in place of any other version of it, evicting to stay within the
// bounds.
func (c *derivedCache) put(k targetKey, v any, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sys := c.owners[k.owner]
	if e := sys[k.system]; e != nil {
		e.generation, e.updated, e.val, e.used = k.generation, k.updated, v, now
		return
	}
	if len(sys) >= c.perOwner {
		c.evictLRU(k.owner)
	} else if c.n >= c.max {
		c.evictLRU(c.largestOwner(k.owner))
	}
	if sys = c.owners[k.owner]; sys == nil {
		sys = map[string]*derived{}
		c.owners[k.owner] = sys
	}
	sys[k.system] = &derived{generation: k.generation, updated: k.updated, val: v, used: now}
	c.n++
}

// largestOwner is the owner holding the most entries: prefer on a tie (the owner about to
// add one gives way before an owner holding as many).
func (c *derivedCache) largestOwner(prefer string) string {
	best, most := prefer, len(c.owners[prefer])
	for o, sys := range c.owners {
		if len(sys) > most {
			best, most = o, len(sys)
		}
	}
	return best
}

// evictLRU drops owner's least recently used entry.
func (c *derivedCache) evictLRU(owner string) {
	var oldest string
	var at time.Time
	for id, e := range c.owners[owner] {
		if oldest == "" || e.used.Before(at) {
			oldest, at = id, e.used
		}
	}
	if oldest != "" {
		c.drop(owner, oldest)
	}
}

// drop removes owner's system id; the caller holds mu.
func (c *derivedCache) drop(owner, id string) {
	sys := c.owners[owner]
	if _, ok := sys[id]; !ok {
		return
	}
	delete(sys, id)
	c.n--
	if len(sys) == 0 {
		delete(c.owners, owner)
	}
}

// forget drops what is kept for owner's system id.
func (c *derivedCache) forget(owner, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(owner, id)
}

// sweep drops the entries last used before cutoff and returns how many.
func (c *derivedCache) sweep(cutoff time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for o, sys := range c.owners {
		for id, e := range sys {
			if e.used.Before(cutoff) {
				c.drop(o, id)
				n++
			}
		}
	}
	return n
}

// size returns the entries kept over all owners, and owner's.
func (c *derivedCache) size(owner string) (all, owners int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, len(c.owners[owner])
}
