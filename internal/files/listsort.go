package files

import (
	"bytes"
	"cmp"
	"slices"
)

// SortKey names the order of a listing.
type SortKey string

// The orders a listing can be sorted in; every order breaks ties by name, so it is total and
// offset paging is stable while the directory does not change.
const (
	SortName SortKey = "name"
	SortSize SortKey = "size"
	SortTime SortKey = "time"
)

// ParseSortKey returns the SortKey named s ("" is SortName) and whether s names one.
func ParseSortKey(s string) (SortKey, bool) {
	switch SortKey(s) {
	case "", SortName:
		return SortName, true
	case SortSize, SortTime:
		return SortKey(s), true
	}
	return "", false
}

// newSortedTopK is newTopK keeping the k first entries in the order by (desc reversed). Memory
// is the same as in name order: at most k records plus the slack held before a trim, whatever
// the directory's size.
func newSortedTopK(k int, after string, by SortKey, desc bool) *topK {
	t := newTopK(k, after)
	if by == "" {
		by = SortName
	}
	t.by, t.desc = by, desc
	return t
}

// byName reports whether t keeps name order ascending, which has its own faster paths.
func (t *topK) byName() bool { return (t.by == "" || t.by == SortName) && !t.desc }

// compare orders an entry (size, mtime, name) against the kept record r in t's order.
func (t *topK) compare(size uint64, mtime uint32, name []byte, r *record) int {
	c := 0
	switch t.by {
	case SortSize:
		c = cmp.Compare(size, r.size)
	case SortTime:
		c = cmp.Compare(mtime, r.time)
	}
	if c == 0 {
		c = bytes.Compare(name, t.bytes(r.name))
	}
	if t.desc {
		return -c
	}
	return c
}

// orderSorted returns the indexes of t.recs in t's order when that is not name ascending.
func (t *topK) orderSorted() []int32 {
	order := make([]int32, len(t.recs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		ra := &t.recs[a]
		return t.compare(ra.size, ra.time, t.bytes(ra.name), &t.recs[b])
	})
	return order
}
