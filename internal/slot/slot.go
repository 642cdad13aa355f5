// Package slot bounds a server-wide resource (parsing slots, buffer bytes, runs) with a share
// per owner: a Pool has a capacity for everyone and a share no one owner may exceed, so one
// owner that saturates its share leaves the rest of the pool to the others. An acquisition
// first takes the owner's share, then the pool's, so at most one share's worth of any owner's
// requests queue for the pool; both waits are first come, first served and end with the
// caller's context.
package slot

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"
)

// Errors wrapped by Acquire's and TryAcquire's refusals; a refusal after a wait also wraps the
// context's error.
var (
	// ErrShare: the owner holds its whole share.
	ErrShare = errors.New("the owner's share is in use")
	// ErrFull: the pool is in use by others.
	ErrFull = errors.New("the server-wide capacity is in use")
	// ErrTooLarge: more units were asked than one owner's share holds.
	ErrTooLarge = errors.New("more than one owner's share")
)

// Pool is a server-wide capacity of units with a per-owner share. It is safe for concurrent
// use; the zero value is not usable (see New).
type Pool struct {
	capacity, share int64
	all             *semaphore.Weighted

	mu     sync.Mutex
	owners map[string]*ownerShare
}

// ownerShare is one owner's semaphore, kept while someone holds or waits for it.
type ownerShare struct {
	sem  *semaphore.Weighted
	refs int
}

// New returns a pool of capacity units, of which one owner may hold at most share. A share
// outside 1…capacity is clamped into it; capacity must be positive.
func New(capacity, share int64) *Pool {
	capacity = max(capacity, 1)
	share = min(max(share, 1), capacity)
	return &Pool{capacity: capacity, share: share, all: semaphore.NewWeighted(capacity), owners: map[string]*ownerShare{}}
}

// Capacity is the pool's size in units.
func (p *Pool) Capacity() int64 { return p.capacity }

// Share is the most units one owner may hold at once.
func (p *Pool) Share() int64 { return p.share }

// Owners is how many owners hold or wait for units now: an owner's share is kept only while
// it does.
func (p *Pool) Owners() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.owners)
}

// Lease is units held from a Pool until Release.
type Lease struct {
	p     *Pool
	owner string
	os    *ownerShare
	mu    sync.Mutex
	n     int64
	done  bool
}

// Acquire waits for n units of owner's share, then for n units of the pool, until ctx ends.
// The error wraps ErrShare or ErrFull (whichever it was waiting for) and ctx's error, or
// ErrTooLarge when n exceeds the share.
func (p *Pool) Acquire(ctx context.Context, owner string, n int64) (*Lease, error) {
	if n > p.share {
		return nil, fmt.Errorf("%w: %d units asked, a share is %d", ErrTooLarge, n, p.share)
	}
	os := p.ref(owner)
	if err := os.sem.Acquire(ctx, n); err != nil {
		p.unref(owner, os)
		return nil, fmt.Errorf("%w: %w", ErrShare, err)
	}
	if err := p.all.Acquire(ctx, n); err != nil {
		os.sem.Release(n)
		p.unref(owner, os)
		return nil, fmt.Errorf("%w: %w", ErrFull, err)
	}
	return &Lease{p: p, owner: owner, os: os, n: n}, nil
}

// TryAcquire takes n units of owner's share and of the pool without waiting.
func (p *Pool) TryAcquire(owner string, n int64) (*Lease, error) {
	if n > p.share {
		return nil, fmt.Errorf("%w: %d units asked, a share is %d", ErrTooLarge, n, p.share)
	}
	os := p.ref(owner)
	if !os.sem.TryAcquire(n) {
		p.unref(owner, os)
		return nil, ErrShare
	}
	if !p.all.TryAcquire(n) {
		os.sem.Release(n)
		p.unref(owner, os)
		return nil, ErrFull
	}
	return &Lease{p: p, owner: owner, os: os, n: n}, nil
}

func (p *Pool) ref(owner string) *ownerShare {
	p.mu.Lock()
	defer p.mu.Unlock()
	os := p.owners[owner]
	if os == nil {
		os = &ownerShare{sem: semaphore.NewWeighted(p.share)}
		p.owners[owner] = os
	}
	os.refs++
	return os
}

func (p *Pool) unref(owner string, os *ownerShare) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if os.refs--; os.refs == 0 {
		delete(p.owners, owner)
	}
}

// Units is how many units the lease holds.
func (l *Lease) Units() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Shrink gives back all but n units (n ≥ 0) of the lease.
func (l *Lease) Shrink(n int64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n = max(n, 0)
	if l.done || n >= l.n {
		return
	}
	l.give(l.n - n)
	l.n = n
}

// Release gives the lease back; later calls do nothing.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	l.give(l.n)
	l.n = 0
	l.p.unref(l.owner, l.os)
}

// give returns k units to the pool, then to the owner's share (so a waiter of another owner
// is not overtaken by this owner's next request).
func (l *Lease) give(k int64) {
	if k <= 0 {
		return
	}
	l.p.all.Release(k)
	l.os.sem.Release(k)
}
