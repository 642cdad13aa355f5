package files

import (
	"slices"
	"sync"
	"time"
)

// Listing snapshots: a large directory is listed whole on the server (one `find -printf`)
// whatever page is asked for, so without help every page and every order of a 100,000-entry
// directory costs the same full listing. A Snapshots cache keeps the entries of a directory
// listed once (its records and byte arena, as topK holds them) for a short time, and answers
// the next pages and the other orders from them, cutting each page out of it.
//
// What a snapshot may be served for, by construction:
//
//   - Its key is the caller's connection identity (ListOptions.SnapshotID: the system and the
//     credential the listing ran as), the resolved directory and the filters that decide which
//     entries exist (hidden files, pattern). Every page goes through List, so the caller's
//     path is resolved and confined (root_dir, a grant's or link's path) on every page, after
//     the caller (package api) has re-run the access decision for the request: a grantee whose
//     grant is revoked is refused before any snapshot is looked at, and a snapshot only ever
//     holds what the same remote account lists in that directory.
//   - Staleness: a snapshot is served only while (1) it is younger than its TTL, (2) the
//     directory's lstat (mtime in seconds and size), taken again before every page, equals the
//     one taken before the listing began, and (3) no write through the API on the same
//     SnapshotID has completed since the listing began (Invalidate, a generation per id). A
//     listing is kept only when the directory's mtime was at least two seconds before the
//     listing began (by this host's clock), so a change within the second of the listing is
//     never masked by mtime's one-second granularity. Entries created, removed or renamed in
//     the directory by anyone are therefore seen at the next page; changes to an entry's own
//     attributes (size, mtime, mode) made outside this instance's API show after at most the
//     TTL.
//   - Memory: every snapshot's bytes are reserved while it is built, from a server-wide budget
//     and the system owner's share of it; a listing that cannot reserve (after expired and
//     then least recently used snapshots are evicted) is answered as before, without one. A
//     page never holds more than its own entries.

// SnapshotConfig bounds a Snapshots cache.
type SnapshotConfig struct {
	// Bytes is the memory all snapshots may hold; PerOwnerBytes one owner's share of it.
	Bytes, PerOwnerBytes int64
	// TTL is how long a snapshot may be served after its listing began.
	TTL time.Duration
	// MaxCount bounds the number of snapshots (default 1024).
	MaxCount int
}

// Snapshots keeps recent listings of large directories for paging. It is safe for concurrent
// use; nil disables snapshots. It runs no goroutine: expired snapshots are dropped when the
// cache is next used.
type Snapshots struct {
	cfg SnapshotConfig
	now func() time.Time

	mu     sync.Mutex
	m      map[snapKey]*snapshot
	used   int64
	owners map[string]int64  // bytes reserved per owner (built and building)
	gens   map[string]uint64 // last Invalidate's generation per SnapshotID
	next   uint64            // the generation counter
	resets uint64            // times gens was emptied
}

// NewSnapshots returns a cache bounded by cfg, or nil (no snapshots) when cfg.Bytes or TTL is
// not positive.
func NewSnapshots(cfg SnapshotConfig) *Snapshots {
	if cfg.Bytes <= 0 || cfg.TTL <= 0 {
		return nil
	}
	if cfg.PerOwnerBytes <= 0 || cfg.PerOwnerBytes > cfg.Bytes {
		cfg.PerOwnerBytes = cfg.Bytes
	}
	if cfg.MaxCount <= 0 {
		cfg.MaxCount = 1024
	}
	return &Snapshots{cfg: cfg, now: time.Now, m: map[snapKey]*snapshot{}, owners: map[string]int64{}, gens: map[string]uint64{}}
}

// maxGens bounds the generations remembered; past it they are forgotten with every snapshot.
const maxGens = 100_000

// Invalidate drops the snapshots of id and keeps listings already under way for it from being
// kept: call it after a write through id (a system and credential) completes.
func (s *Snapshots) Invalidate(id string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.gens) >= maxGens {
		s.gens = map[string]uint64{}
		s.resets++
		for k, sn := range s.m {
			s.dropLocked(k, sn)
		}
	}
	s.next++
	s.gens[id] = s.next
	for k, sn := range s.m {
		if k.id == id {
			s.dropLocked(k, sn)
		}
	}
}

// snapKey names what a snapshot lists.
type snapKey struct {
	id, dir, pattern string
	hidden           bool
}

// dirStamp is what a directory's lstat says about changes to its entries.
type dirStamp struct {
	mtime int64
	size  int64
}

// snapshot is one directory's entries, immutable once built (its orders are computed once).
type snapshot struct {
	t     *topK // every entry; t.recs and t.arena are read only
	stamp dirStamp
	start time.Time
	gen   uint64
	reset uint64
	owner string
	bytes int64
	used  time.Time // last served, for LRU eviction (guarded by Snapshots.mu)
	// partial: entries were read by name and type only (a listing in name order), so the
	// snapshot serves name order only, each page's entries stat'ed as it is cut.
	partial bool

	once   [3]sync.Once
	orders [3][]int32 // ascending orders by name, size, time
}

// order returns the snapshot's indexes in by's ascending order.
func (sn *snapshot) order(by SortKey) []int32 {
	i := 0
	switch by {
	case SortSize:
		i = 1
	case SortTime:
		i = 2
	}
	sn.once[i].Do(func() {
		t := *sn.t // a header of its own: recs and arena are shared, read only
		t.by, t.desc = by, false
		sn.orders[i] = t.order()
	})
	return sn.orders[i]
}

// lookup returns the snapshot for k if it may be served with the directory's current stamp
// in order by.
func (s *Snapshots) lookup(k snapKey, stamp dirStamp, by SortKey) *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	sn := s.m[k]
	if sn == nil {
		return nil
	}
	if sn.stamp != stamp || sn.gen != s.gens[k.id] || sn.reset != s.resets {
		s.dropLocked(k, sn)
		return nil
	}
	if sn.partial && by != "" && by != SortName {
		return nil // listed again in full, which then replaces it
	}
	sn.used = s.now()
	return sn
}

// builder collects every entry of one listing for a snapshot, reserving its memory as it
// grows; when a reservation fails it stops collecting and keeps nothing.
type builder struct {
	s        *Snapshots
	k        snapKey
	owner    string
	stamp    dirStamp
	start    time.Time
	gen      uint64
	reset    uint64
	t        *topK
	reserved int64
	failed   bool
	partial  bool
}

// recordBytes is a record's size in memory plus its three order indexes.
const recordBytes = 48 + 3*4

// reserveChunk is the least a builder reserves at a time.
const reserveChunk = 1 << 20

// newBuilder starts collecting a listing of k taken with the directory at stamp, or returns
// nil when the directory changed too recently for its stamp to show later changes.
func (s *Snapshots) newBuilder(k snapKey, owner string, stamp dirStamp) *builder {
	start := s.now()
	if stamp.mtime > start.Unix()-2 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &builder{s: s, k: k, owner: owner, stamp: stamp, start: start, gen: s.gens[k.id], reset: s.resets,
		t: newTopK(MaxRecursiveEntries, "")}
}

// add is topK.add for the snapshot, with its memory reserved first.
func (b *builder) add(d *dirent, name []byte, abs string) {
	if b.failed {
		return
	}
	need := int64(cap(b.t.recs)+1)*recordBytes + int64(cap(b.t.arena)+len(name)+len(d.link)+len(abs))
	if len(b.t.recs) == cap(b.t.recs) {
		need += int64(cap(b.t.recs)) * recordBytes // append doubles
	}
	if len(b.t.arena)+len(name)+len(d.link)+len(abs) > cap(b.t.arena) {
		need += int64(cap(b.t.arena)) + int64(len(name)+len(d.link)+len(abs))
	}
	if need > b.reserved {
		n := max(need-b.reserved, reserveChunk)
		if !b.s.reserve(b.owner, n) {
			b.abandon()
			return
		}
		b.reserved += n
	}
	b.t.add(d, name, abs)
	b.partial = b.partial || d.st.Mode&modeUnknown != 0
	if b.t.total > MaxRecursiveEntries {
		b.abandon()
	}
}

// abandon gives back what b reserved and stops it collecting.
func (b *builder) abandon() {
	b.failed = true
	b.t = nil
	b.s.release(b.owner, b.reserved)
	b.reserved = 0
}

// finish keeps b's listing if nothing invalidated it meanwhile, and returns it (nil if not).
func (b *builder) finish() *snapshot {
	if b.failed {
		return nil
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.gen != s.gens[b.k.id] || b.reset != s.resets || len(s.m) >= s.cfg.MaxCount && !s.evictOldestLocked("") {
		s.releaseLocked(b.owner, b.reserved)
		return nil
	}
	if old := s.m[b.k]; old != nil {
		s.dropLocked(b.k, old)
	}
	sn := &snapshot{t: b.t, stamp: b.stamp, start: b.start, gen: b.gen, reset: b.reset, owner: b.owner, bytes: b.reserved, used: s.now(), partial: b.partial}
	s.m[b.k] = sn
	return sn
}

// reserve takes n bytes of owner's share and of the budget, evicting expired snapshots, then
// the least recently used of owner's (when the share is short) or of anyone's.
func (s *Snapshots) reserve(owner string, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.cfg.PerOwnerBytes {
		return false
	}
	s.expireLocked()
	for {
		switch {
		case s.owners[owner]+n > s.cfg.PerOwnerBytes:
			if !s.evictOldestLocked(owner) {
				return false
			}
		case s.used+n > s.cfg.Bytes:
			if !s.evictOldestLocked("") {
				return false
			}
		default:
			s.used += n
			s.owners[owner] += n
			return true
		}
	}
}

// release gives back n bytes reserved for owner.
func (s *Snapshots) release(owner string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(owner, n)
}

func (s *Snapshots) releaseLocked(owner string, n int64) {
	s.used -= n
	if s.owners[owner] -= n; s.owners[owner] <= 0 {
		delete(s.owners, owner)
	}
}

// dropLocked removes k's snapshot sn and gives back its bytes. Pages being cut from sn go on
// reading it (it is immutable); its memory is freed with the last of them.
func (s *Snapshots) dropLocked(k snapKey, sn *snapshot) {
	if s.m[k] != sn {
		return
	}
	delete(s.m, k)
	s.releaseLocked(sn.owner, sn.bytes)
}

// expireLocked drops the snapshots older than the TTL.
func (s *Snapshots) expireLocked() {
	cut := s.now().Add(-s.cfg.TTL)
	for k, sn := range s.m {
		if sn.start.Before(cut) {
			s.dropLocked(k, sn)
		}
	}
}

// evictOldestLocked drops the least recently served snapshot (of owner, unless ""), and
// reports whether there was one.
func (s *Snapshots) evictOldestLocked(owner string) bool {
	var (
		ok     bool
		oldK   snapKey
		oldest *snapshot
	)
	for k, sn := range s.m {
		if (owner == "" || sn.owner == owner) && (oldest == nil || sn.used.Before(oldest.used)) {
			oldK, oldest, ok = k, sn, true
		}
	}
	if ok {
		s.dropLocked(oldK, oldest)
	}
	return ok
}

// snapshotPage cuts the page opts asks for out of sn, as List would return it for dir.
func snapshotPage(sn *snapshot, dir string, opts ListOptions) *Listing {
	order := sn.order(opts.Sort)
	n := len(order)
	start := 0
	if opts.After != "" { // name order ascending (List checked)
		t := sn.t
		start, _ = slices.BinarySearchFunc(order, opts.After, func(i int32, after string) int {
			name := t.bytes(t.recs[i].name)
			if string(name) <= after {
				return -1
			}
			return 1
		})
	}
	from := min(start+opts.Offset, n)
	end := n
	if opts.Limit > 0 {
		end = min(from+opts.Limit, n)
	}
	end = min(end, from+MaxRecursiveEntries)
	idx := make([]int32, 0, end-from)
	for i := from; i < end; i++ {
		j := i
		if opts.Desc {
			j = n - 1 - i
		}
		idx = append(idx, order[j])
	}
	l := &Listing{Path: dir, Total: n, Entries: sn.t.entries(dir, idx)}
	if end < n && len(l.Entries) > 0 {
		l.more = true
		l.NextOffset = opts.Offset + len(l.Entries)
		l.NextAfter = l.Entries[len(l.Entries)-1].Name
	}
	return l
}
