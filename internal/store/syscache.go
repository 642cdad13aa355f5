package store

import (
	"slices"
	"sync"
)

// SystemCache keeps what a driver's GetSystemCredential read (a system with its credential),
// each under the store's system generation at the time of that read: a counter that a trigger
// in the database increases in the same transaction as every insert, update or delete of a
// system or a credential, whoever writes (this process, another instance on the same database,
// an operator's SQL). A lookup first reads the generation, which costs the driver far less than
// the whole row; an entry is used only when it was read under exactly that generation, that is
// when no system or credential changed anywhere since. So the answer is what the full query
// would return at the time of the generation's read, and a credential deleted or replaced, a
// system changed or deleted, is seen by the first lookup that starts after its commit, as
// without the cache: the guarantee does not depend on this process hearing of the change.
//
// Entries are copies both ways (the caller may change what it gets), at most max of them; a
// newer generation empties the cache (every entry under an older one is stale), and a full
// cache is emptied before it takes another entry, which costs lookups their speed, never their
// correctness.
type SystemCache struct {
	mu      sync.Mutex
	max     int
	gen     int64 // the newest generation an entry was stored under
	entries map[[2]string]cachedSystem
}

// cachedSystem is one entry: copies of what a lookup returned.
type cachedSystem struct {
	sys  *System
	cred *Credential // nil: the system has no credential
}

// NewSystemCache returns an empty cache of at most max entries (max ≤ 0: caches nothing).
func NewSystemCache(max int) *SystemCache {
	return &SystemCache{max: max, entries: map[[2]string]cachedSystem{}}
}

// Get returns copies of owner's system id and its credential if they were stored under
// generation gen.
func (c *SystemCache) Get(owner, id string, gen int64) (*System, *Credential, bool) {
	c.mu.Lock()
	e, ok := c.entries[[2]string{owner, id}]
	ok = ok && gen == c.gen
	c.mu.Unlock()
	if !ok {
		return nil, nil, false
	}
	return e.sys.Clone(), e.cred.Clone(), true
}

// Put stores copies of sys and cred (nil when the system has none), read under generation gen.
func (c *SystemCache) Put(owner, id string, gen int64, sys *System, cred *Credential) {
	if c.max <= 0 || sys == nil {
		return
	}
	e := cachedSystem{sys: sys.Clone(), cred: cred.Clone()}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case gen < c.gen:
		return // read before a change another lookup has already seen
	case gen > c.gen || len(c.entries) >= c.max:
		clear(c.entries)
		c.gen = gen
	}
	c.entries[[2]string{owner, id}] = e
}

// Clone returns a copy of s that shares no memory with it (nil for nil).
func (s *System) Clone() *System {
	if s == nil {
		return nil
	}
	c := *s
	c.HostKeys = slices.Clone(s.HostKeys)
	c.HostKeyFingerprints = slices.Clone(s.HostKeyFingerprints)
	c.Ciphers = slices.Clone(s.Ciphers)
	c.KeyExchanges = slices.Clone(s.KeyExchanges)
	return &c
}

// Clone returns a copy of c that shares no memory with it (nil for nil).
func (c *Credential) Clone() *Credential {
	if c == nil {
		return nil
	}
	d := *c
	d.Sealed.WrappedKey = slices.Clone(c.Sealed.WrappedKey)
	d.Sealed.Ciphertext = slices.Clone(c.Sealed.Ciphertext)
	return &d
}
