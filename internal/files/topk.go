package files

import (
	"bytes"
	"encoding/binary"
	"os"
	"path"
	"slices"
	"time"

	"github.com/pkg/sftp"
)

// topK keeps the k entries with the smallest names (above after, when set) of everything
// offered, and counts every entry offered: a page of a directory in name order in O(k) memory,
// whatever the directory's size.
//
// It is built for 10,000-entry pages read at tens of listings per second: entries are held as
// pointer-free records whose names, link targets and paths live in one byte arena (nothing
// per entry for the garbage collector to allocate or scan), sorted by index on an 8-byte key,
// and turned into Entry values only for the returned page, with their strings cut from one
// string per page.
type topK struct {
	k     int
	after string
	hold  int      // records held before a trim: k plus some slack
	recs  []record // unordered
	arena []byte   // the bytes of recs' spans
	cut   []byte   // once trimmed: the largest name kept; larger names are dropped
	total int      // entries offered
	more  bool     // an entry above after was dropped because k were smaller

	by     SortKey // the order kept (SortName ascending unless set by newSortedTopK)
	desc   bool
	cutRec *record // once trimmed in another order than name ascending: the last record kept
}

// span is a stretch of topK.arena.
type span struct{ off, n uint32 }

// record is one kept entry.
type record struct {
	name span
	link span // symlink target when the reader knew it
	path span // the absolute path when it is not the listed directory joined with name
	size uint64
	mode uint32 // SFTP's st_mode: type and permission bits
	time uint32 // mtime, seconds since the epoch (SFTP v3 carries 32 bits)
	uid  uint32
	gid  uint32
}

func newTopK(k int, after string) *topK {
	return &topK{k: k, after: after, hold: k + min(max(k, 1024), 64<<10)}
}

// add offers one entry named name (which may differ from d.name in a recursive listing). abs
// is its absolute path when that is not what page derives from the directory and name.
func (t *topK) add(d *dirent, name []byte, abs string) {
	t.total++
	if t.after != "" && string(name) <= t.after {
		return
	}
	if t.cutRec != nil && t.compare(d.st.Size, d.st.Mtime, name, t.cutRec) > 0 {
		t.more = true
		return
	}
	if t.cut != nil && bytes.Compare(name, t.cut) > 0 {
		t.more = true
		return
	}
	r := record{name: t.put(name), size: d.st.Size, mode: d.st.Mode, time: d.st.Mtime, uid: d.st.UID, gid: d.st.GID}
	if len(d.link) > 0 {
		r.link = t.put(d.link)
	}
	if abs != "" {
		r.path = t.put([]byte(abs))
	}
	t.recs = append(t.recs, r)
	if len(t.recs) >= t.hold {
		t.trim()
	}
}

// put appends b to the arena.
func (t *topK) put(b []byte) span {
	s := span{uint32(len(t.arena)), uint32(len(b))}
	t.arena = append(t.arena, b...)
	return s
}

func (t *topK) bytes(s span) []byte { return t.arena[s.off : s.off+s.n : s.off+s.n] }

// trim keeps the k smallest records, in a fresh arena, and remembers the largest as the cut.
func (t *topK) trim() {
	order := t.order()
	if len(order) <= t.k {
		return
	}
	t.more = true
	recs := make([]record, 0, t.hold)
	var arena []byte
	for _, i := range order[:t.k] {
		r := t.recs[i]
		r.name = span{uint32(len(arena)), r.name.n}
		arena = append(arena, t.bytes(t.recs[i].name)...)
		if r.link.n > 0 {
			r.link = span{uint32(len(arena)), r.link.n}
			arena = append(arena, t.bytes(t.recs[i].link)...)
		}
		if r.path.n > 0 {
			r.path = span{uint32(len(arena)), r.path.n}
			arena = append(arena, t.bytes(t.recs[i].path)...)
		}
		recs = append(recs, r)
	}
	t.recs, t.arena = recs, arena
	if t.byName() {
		t.cut = t.bytes(recs[len(recs)-1].name)
		return
	}
	last := recs[len(recs)-1]
	t.cutRec = &last
}

// order returns the indexes of t.recs in name order (bytewise). Names are compared by an
// 8-byte big-endian key taken after the prefix every name shares (so "run-000017.h5" and
// "run-000018.h5" differ in their keys), and in full only where keys are equal.
func (t *topK) order() []int32 {
	if !t.byName() {
		return t.orderSorted()
	}
	n := len(t.recs)
	if n == 0 {
		return nil
	}
	first := t.bytes(t.recs[0].name)
	lcp := len(first)
	for i := 1; i < n && lcp > 0; i++ {
		lcp = commonPrefix(first[:lcp], t.bytes(t.recs[i].name))
	}
	keys := make([]sortKey, n)
	for i := range t.recs {
		keys[i] = sortKey{key: key8(t.bytes(t.recs[i].name)[lcp:]), i: int32(i)}
	}
	tail := lcp + 8
	slices.SortFunc(keys, func(a, b sortKey) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		na, nb := t.bytes(t.recs[a.i].name), t.bytes(t.recs[b.i].name)
		return bytes.Compare(na[min(tail, len(na)):], nb[min(tail, len(nb)):])
	})
	order := make([]int32, n)
	for i, k := range keys {
		order[i] = k.i
	}
	return order
}

// sortKey is a record's index with its name's key.
type sortKey struct {
	key uint64
	i   int32
}

// key8 packs the first 8 bytes of b big-endian, padded with zeros: keys compare as the
// bytes do, and a shorter name sorts before its extensions since no name holds a NUL.
func key8(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b)
	}
	var k [8]byte
	copy(k[:], b)
	return binary.BigEndian.Uint64(k[:])
}

// commonPrefix returns the length of the prefix a and b share.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// page returns the kept entries from the from-th on, in name order, as entries of directory
// dir. It records in t.more whether entries were dropped.
func (t *topK) page(dir string, from int) []Entry {
	order := t.order()
	if len(order) > t.k {
		t.more = true
		order = order[:t.k]
	}
	if from >= len(order) {
		return []Entry{} // an empty page, not a missing one
	}
	return t.entries(dir, order[from:])
}

// entries returns the records at indexes order as entries of directory dir. Every string of
// the page is cut from one, which holds the page's bytes only (names, link targets, paths).
func (t *topK) entries(dir string, order []int32) []Entry {
	prefix := dir + "/"
	if dir == "/" {
		prefix = dir
	}
	size := 0
	for _, i := range order {
		r := &t.recs[i]
		size += int(r.name.n+r.link.n) + int(r.path.n)
		if r.path.n == 0 {
			size += len(prefix) + int(r.name.n)
		}
	}
	pb := make([]byte, 0, size)
	for _, i := range order {
		r := &t.recs[i]
		pb = append(pb, t.bytes(r.name)...)
		pb = append(pb, t.bytes(r.link)...)
		if r.path.n > 0 {
			pb = append(pb, t.bytes(r.path)...)
		} else {
			pb = append(append(pb, prefix...), t.bytes(r.name)...)
		}
	}
	strs := string(pb)
	cut := func(n int) string {
		s := strs[:n]
		strs = strs[n:]
		return s
	}
	out := make([]Entry, len(order))
	for j, i := range order {
		r := &t.recs[i]
		e := &out[j]
		e.Name = cut(int(r.name.n))
		if r.link.n > 0 {
			e.LinkTarget = cut(int(r.link.n))
		}
		if r.path.n > 0 {
			e.Path = cut(int(r.path.n))
		} else {
			e.Path = cut(len(prefix) + int(r.name.n))
		}
		m := toFileMode(r.mode &^ modeUnknown)
		e.Type = typeOf(m)
		e.Size = int64(r.size)
		if r.mode&modeUnknown == 0 {
			e.Mode = modeString(m)
		} // else "": FS.fillAttrs reads them
		e.ModTime = time.Unix(int64(r.time), 0).UTC()
		e.UID, e.GID = r.uid, r.gid
	}
	return out
}

// plainName reports whether name joined to a directory with a slash is its clean path
// (as path.Join would make it): not empty, ".", ".." and without a slash.
func plainName(name []byte) bool {
	return len(name) > 0 && !(name[0] == '.' && (len(name) == 1 || len(name) == 2 && name[1] == '.')) && bytes.IndexByte(name, '/') < 0
}

// joinedPath is the absolute path to store for name in dir: "" when page derives it.
func joinedPath(dir string, name []byte) string {
	if plainName(name) {
		return ""
	}
	return path.Join(dir, string(name))
}

// toFileMode converts SFTP's st_mode as pkg/sftp does.
func toFileMode(mode uint32) os.FileMode {
	st := sftp.FileStat{Mode: mode}
	return st.FileMode()
}
