// Package guard orders the file operations that principals acting through someone else's grant
// or link make on that owner's files, so that none of them can escape the granted tree by
// changing it while another one runs.
//
// # Why a lock
//
// Over SFTP v3 every request names its file by path and the server follows every symlink along
// that path; there is no openat, no O_NOFOLLOW per component and no inode in the attributes. So
// "resolve the path, check it lies inside the grant, then operate on it" (package confine) is
// only as good as the tree staying put between the check and the operation. A grantee with write
// access can change the tree through the API: in the attack that motivated this package, bob
// started an archive download of share/t, stalled his reader, and while the walk waited he
// replaced the directory share/t/zzz by a symlink pointing two levels up; the walk, which had
// seen zzz as a directory, then read /home/alice. A recursive delete was turned the same way.
//
// A walk or a path lookup can only be led outside when, between its check and its request, a
// symlink appears at a name it already judged: a link is created there (symlink, extraction,
// a copy that recreates links, a transfer that recreates links), or an entry holding one is
// renamed there (move). Removing, creating files or directories, writing and changing modes
// cannot do it. So the operations are split in two:
//
//   - restructuring operations (move, symlink, copy, extract) hold the owner's guard
//     exclusively while they check and act;
//   - every other operation through a grant or a link (listing, stat, reads, archive downloads,
//     uploads, recursive delete and chmod, checksums, transfers with a shared end) holds it
//     shared, from its first check until it has no more use for the paths it judged: a walk for
//     the whole walk, a download until the last range is read.
//
// Held that way, no grantee or link holder can restructure the owner's files while another one
// relies on what it checked: the property holds by construction, not by a second check that
// could itself be raced. The key is the owner (every system of theirs), because two of an owner's
// systems may reach the same account, and a grant on a parent directory covers the root of a
// grant on a child.
//
// The guard orders what runs at the same time; what one principal leaves behind for a later
// request is another matter. A write grantee may rename or copy entries (an owner's symlink
// leading out included) onto the path of a share nested in theirs (a read grant or a link on
// share/pub under a write grant on share/), with no walk in flight and so nothing to wait for:
// the nested share's next request would follow it. Package confine closes that by construction,
// not by ordering: a share's path is never followed through a symlink below the home or root
// directory (confine.Root.Narrow), so what is renamed into place there is a real directory or
// file, and everything below it is judged against the share's path as usual.
//
// # What it does not cover
//
// The owner is not ordered: an owner acting on their own system (through the API or a shell)
// keeps today's behaviour and speed. An owner who restructures a shared tree while grantees work
// in it can expose what a racing walk reaches; that is the owner's own doing on the owner's
// files. Two sshapi users holding credentials for the same remote account are not ordered
// against each other either.
//
// # Waiting
//
// Exclusive holders are preferred for a while: for the first Config.Prefer of its wait a waiting
// exclusive holder makes new shared holders queue behind it, so a stream of short reads cannot
// starve a move; after that it stops holding them back and waits on, until Config.Wait, for the
// holders in place to finish. Past Config.Wait the caller gets ErrBusy (the API answers 503 with
// Retry-After). So a restructuring operation waits at most Config.Wait for the walks and
// downloads in flight, and delays other operations by at most Config.Prefer. One principal may
// have at most Config.WaitersPerPrincipal exclusive holds waiting on one key, so nobody can keep
// new operations held back by queueing moves behind a stalled download of their own.
//
// # Several instances
//
// With a Remote (PostgreSQL advisory locks, see Postgres) the guard holds across instances: an
// instance holds one shared advisory lock per owner while any of its local holders is shared,
// and an exclusive holder takes the exclusive advisory lock, which PostgreSQL grants only when no
// instance holds the shared one.
//
// A session-level advisory lock lives as long as the database session that took it, not as long
// as this instance believes: when that session ends while the lock is held (the server restarted
// or failed over, the connection was cut, the backend was terminated), PostgreSQL gives the lock
// away, and another instance may take it exclusively and restructure the tree while this
// instance's walks still rely on what they checked. So a hold is bound to its lock's life by
// construction: Hold hands back a context, a child of the caller's, that the work relying on the
// hold must use, and that is cancelled with ErrLost as its cause as soon as the remote lock is
// known lost; every local holder sharing that lock is cancelled, and a new shared holder takes a
// fresh lock instead of joining the lost one. Lost means stop, not re-acquire: a walk in flight
// cannot know what changed while it was unlocked, so only new work (a new request, a
// transfer's next chunk, which judges its paths afresh under a new hold) may go on.
//
// Postgres notices a lost lock from a watcher per held connection (see Postgres.Lock), ended
// with the lock. It waits on the connection itself, at no cost in round trips, so a session
// that ends visibly (a terminated backend's FATAL error, which the server sends before it frees
// the locks; a server shutting down; a reset connection) is seen when that message arrives,
// while the lock's next holder is still on its way back from PostgreSQL to its instance and
// then to the files over SSH. A ping alone would leave its whole period for that. When the
// connection has been quiet for Config.RemotePing the watcher pings it, and takes no answer
// within Config.RemotePing for a lost lock, so a silently dead connection (a partition, a
// failover whose old primary vanished) stops its holders within twice that. That bound only
// closes the hole if the server gives up on a silent client later: PostgreSQL's default (the
// operating system's TCP keepalive, hours) does; tcp_keepalives_* or tcp_user_timeout set below
// 2×RemotePing on the server would reopen it. What a stopped holder had already sent (an SFTP
// request in flight) is not called back: loss bounds how long work goes on, it cannot undo it.
package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrBusy reports that the guard could not be had within Config.Wait.
var ErrBusy = errors.New("another operation on these shared files is in progress")

// ErrLost is the cause of a held context cancelled because the hold ended before its release:
// its remote lock was lost (the database session holding it ended), so other instances may have
// restructured the files since its checks.
var ErrLost = errors.New("the guard on these shared files was lost")

// errReleased is the cause of a held context after its release.
var errReleased = errors.New("guard released")

// DefaultWait is Config.Wait when unset.
const DefaultWait = 5 * time.Second

// Config tunes a Guard.
type Config struct {
	// Wait bounds every wait for the guard (default 5s).
	Wait time.Duration `yaml:"wait" env:"WAIT"`
	// Prefer is how long a waiting exclusive holder keeps new shared holders back (default
	// 250ms).
	Prefer time.Duration `yaml:"prefer" env:"PREFER"`
	// WaitersPerPrincipal bounds one principal's exclusive holds waiting on one key (default 2);
	// more are ErrBusy at once.
	WaitersPerPrincipal int `yaml:"waiters_per_principal" env:"WAITERS_PER_PRINCIPAL"`
	// RemoteConns bounds the database connections a Guard on PostgreSQL holds locks on
	// (default 16; each owner with shared files in use holds at most two).
	RemoteConns int `yaml:"remote_conns" env:"REMOTE_CONNS"`
	// RemotePing is how long a connection holding a lock on PostgreSQL may stay quiet before
	// it is pinged, and how long the ping may take before the lock is taken for lost (default
	// 2s): a silently dead connection stops its holders within twice this. A session that
	// ends visibly is noticed at once, whatever this is.
	RemotePing time.Duration `yaml:"remote_ping" env:"REMOTE_PING"`
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Wait <= 0 {
		c.Wait = DefaultWait
	}
	if c.Prefer <= 0 {
		c.Prefer = 250 * time.Millisecond
	}
	if c.WaitersPerPrincipal <= 0 {
		c.WaitersPerPrincipal = 2
	}
	if c.RemoteConns <= 0 {
		c.RemoteConns = 16
	}
	if c.RemotePing <= 0 {
		c.RemotePing = 2 * time.Second
	}
	return c
}

// Remote holds a key across instances. Lock blocks until the lock is had, ctx ends (its error,
// or ErrBusy when ctx's deadline passed) and returns the function that releases it, and lost: a
// context that is done, with the reason as its cause, once the lock is known to have ended other
// than through unlock (others may have it then). A Remote must notice that promptly and without
// a holder asking: the Guard stops the lock's holders on it.
type Remote interface {
	Lock(ctx context.Context, key string, exclusive bool) (lost context.Context, unlock func(), err error)
}

// Guard is a readers-writer lock per key, with writer preference and bounded waits, optionally
// held across instances by a Remote. The zero value is not usable; build one with New. It is
// safe for concurrent use.
type Guard struct {
	cfg    Config
	remote Remote

	mu   sync.Mutex
	keys map[string]*entry
}

// entry is the state of one key; it lives while anyone holds or waits for the key.
type entry struct {
	users          int // holders and waiters; the entry is dropped at 0
	readers        int
	writer         bool
	writersWaiting int            // exclusive holders waiting that still hold readers back
	waiting        map[string]int // exclusive holders waiting, by principal
	wake           chan struct{}  // closed and replaced on every release

	remoteMu sync.Mutex  // serialises taking and giving back the shared remote hold
	shared   *remoteHold // the shared remote lock this instance's readers join; nil when none
}

// remoteHold is one shared remote lock and the local readers relying on it.
type remoteHold struct {
	refs   int
	lost   context.Context
	unlock func()
}

// New returns a Guard; remote may be nil for a single instance.
func New(cfg Config, remote Remote) *Guard {
	return &Guard{cfg: cfg.WithDefaults(), remote: remote, keys: map[string]*entry{}}
}

// Wait is the configured bound on a wait.
func (g *Guard) Wait() time.Duration { return g.cfg.Wait }

// Hold takes key shared or exclusive for principal who (the caller the API acts for), waiting
// at most Config.Wait (and no longer than ctx), and returns the function that releases it (call
// it exactly once) and held, a child of ctx that the work relying on the hold must use: it is
// cancelled with a cause wrapping ErrLost if the hold is lost before its release (see "Several
// instances"), and when it is released.
func (g *Guard) Hold(ctx context.Context, key, who string, exclusive bool) (held context.Context, release func(), err error) {
	parent := ctx
	ctx, cancel := context.WithTimeoutCause(ctx, g.cfg.Wait, ErrBusy)
	defer cancel()
	g.mu.Lock()
	e := g.keys[key]
	if e == nil {
		e = &entry{wake: make(chan struct{}), waiting: map[string]int{}}
		g.keys[key] = e
	}
	if exclusive && e.waiting[who] >= g.cfg.WaitersPerPrincipal {
		g.mu.Unlock()
		return nil, nil, fmt.Errorf("%d moves of yours already wait: %w", e.waiting[who], ErrBusy)
	}
	e.users++
	var prefer <-chan time.Time // while set, this writer holds new readers back
	if exclusive {
		e.writersWaiting++
		e.waiting[who]++
		t := time.NewTimer(g.cfg.Prefer)
		defer t.Stop()
		prefer = t.C
	}
	// stopWaiting undoes the waiting writer's marks.
	stopWaiting := func() {
		if prefer != nil {
			e.writersWaiting--
			prefer = nil
		}
		if e.waiting[who]--; e.waiting[who] == 0 {
			delete(e.waiting, who)
		}
	}
	for {
		if exclusive && !e.writer && e.readers == 0 {
			stopWaiting()
			e.writer = true
			break
		}
		if !exclusive && !e.writer && e.writersWaiting == 0 {
			e.readers++
			break
		}
		wake := e.wake
		g.mu.Unlock()
		select {
		case <-wake:
			g.mu.Lock()
		case <-prefer:
			g.mu.Lock()
			e.writersWaiting-- // readers held back by this writer may go
			prefer = nil
			g.wakeLocked(e)
		case <-ctx.Done():
			g.mu.Lock()
			if exclusive {
				stopWaiting()
				g.wakeLocked(e)
			}
			g.dropLocked(key, e)
			g.mu.Unlock()
			return nil, nil, waitErr(ctx)
		}
	}
	g.mu.Unlock()
	lost, unlockRemote, err := g.holdRemote(ctx, key, e, exclusive)
	if err != nil {
		g.releaseLocal(key, e, exclusive)
		return nil, nil, err
	}
	held, stop := context.WithCancelCause(parent)
	unwatch := func() bool { return false }
	if lost != nil {
		// Runs at once if the lock was lost already.
		unwatch = context.AfterFunc(lost, func() { stop(fmt.Errorf("%w: %w", ErrLost, context.Cause(lost))) })
	}
	var once sync.Once
	return held, func() {
		once.Do(func() {
			unwatch()
			stop(errReleased)
			unlockRemote()
			g.releaseLocal(key, e, exclusive)
		})
	}, nil
}

// holdRemote takes the remote side of a local hold: the exclusive lock for a writer; for readers
// one shared lock per key and instance, taken by the first and given back by the last. Readers
// never join a lock known lost: the first one after the loss takes a fresh lock, while the
// readers of the lost one (told to stop) give it back as they finish. lost is nil without a
// Remote.
func (g *Guard) holdRemote(ctx context.Context, key string, e *entry, exclusive bool) (lost context.Context, release func(), err error) {
	if g.remote == nil {
		return nil, func() {}, nil
	}
	if exclusive {
		lost, unlock, err := g.remote.Lock(ctx, key, true)
		if err != nil {
			return nil, nil, remoteErr(ctx, err)
		}
		return lost, unlock, nil
	}
	e.remoteMu.Lock()
	defer e.remoteMu.Unlock()
	h := e.shared
	if h == nil || h.lost.Err() != nil {
		lost, unlock, err := g.remote.Lock(ctx, key, false)
		if err != nil {
			return nil, nil, remoteErr(ctx, err)
		}
		h = &remoteHold{lost: lost, unlock: unlock}
		e.shared = h
	}
	h.refs++
	return h.lost, func() {
		e.remoteMu.Lock()
		defer e.remoteMu.Unlock()
		if h.refs--; h.refs == 0 {
			h.unlock()
			if e.shared == h {
				e.shared = nil
			}
		}
	}, nil
}

// releaseLocal gives back a local hold and wakes the waiters.
func (g *Guard) releaseLocal(key string, e *entry, exclusive bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if exclusive {
		e.writer = false
	} else {
		e.readers--
	}
	g.wakeLocked(e)
	g.dropLocked(key, e)
}

// wakeLocked lets every waiter of e look again.
func (g *Guard) wakeLocked(e *entry) {
	close(e.wake)
	e.wake = make(chan struct{})
}

// dropLocked forgets e when nobody holds or waits for it.
func (g *Guard) dropLocked(key string, e *entry) {
	if e.users--; e.users == 0 {
		delete(g.keys, key)
	}
}

// waitErr is the error of a wait that ctx ended: ErrBusy when the guard's own bound passed.
func waitErr(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrBusy) || errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("waited %w", ErrBusy)
	}
	return ctx.Err()
}

// remoteErr classifies a Remote failure: a wait that ran out is ErrBusy.
func remoteErr(ctx context.Context, err error) error {
	if errors.Is(err, ErrBusy) || ctx.Err() != nil {
		if werr := waitErr(ctx); werr != nil && !errors.Is(werr, context.Canceled) {
			return werr
		}
	}
	return fmt.Errorf("guard: %w", err)
}
