package files

import (
	"container/heap"
	"slices"
	"strings"
)

// topK keeps the k entries with the smallest names (above after, when set) seen so far, in a
// max-heap, and counts every entry offered: a page of a directory in name order in O(k)
// memory, whatever the directory's size.
type topK struct {
	k     int
	after string
	h     entryHeap
	total int  // entries offered
	more  bool // an entry above after was dropped because k were smaller
}

func newTopK(k int, after string) *topK {
	return &topK{k: k, after: after, h: make(entryHeap, 0, min(k, 1024))}
}

// add offers one entry.
func (t *topK) add(e Entry) {
	t.total++
	if t.after != "" && e.Name <= t.after {
		return
	}
	switch {
	case len(t.h) < t.k:
		// Collected unordered until the k-th: the heap is only built once entries are dropped.
		t.h = append(t.h, e)
		if len(t.h) == t.k {
			heap.Init(&t.h)
		}
	case e.Name < t.h[0].Name:
		t.h[0] = e
		heap.Fix(&t.h, 0)
		t.more = true
	default:
		t.more = true
	}
}

// sorted returns the kept entries in name order.
func (t *topK) sorted() []Entry {
	// Sorting pointers moves 8 bytes per swap instead of a whole Entry.
	ptrs := make([]*Entry, len(t.h))
	for i := range t.h {
		ptrs[i] = &t.h[i]
	}
	slices.SortFunc(ptrs, func(a, b *Entry) int { return strings.Compare(a.Name, b.Name) })
	out := make([]Entry, len(ptrs))
	for i, p := range ptrs {
		out[i] = *p
	}
	return out
}

// entryHeap is a max-heap of entries by name.
type entryHeap []Entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].Name > h[j].Name }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(Entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
