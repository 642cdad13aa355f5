package store

import (
	"strings"
	"testing"
	"time"
)

// TestAuditIDsSortByCreationTime: ids of entries created later compare greater as strings (so
// the unique index on them grows at its right edge), whatever their random part, over the whole
// range of times, and ids made in the same millisecond differ.
func TestAuditIDsSortByCreationTime(t *testing.T) {
	times := []time.Time{
		time.UnixMilli(0),
		time.UnixMilli(1),
		time.UnixMilli(31),
		time.UnixMilli(32),
		time.Date(2026, 11, 27, 19, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 27, 19, 0, 0, int(time.Millisecond), time.UTC),
		time.Date(2026, 11, 27, 19, 0, 1, 0, time.UTC),
		time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		time.UnixMilli(1<<48 - 1),
	}
	seen := map[string]bool{}
	prev := ""
	for _, tm := range times {
		var first, last string
		for i := range 200 {
			id := newAuditID(tm)
			if len(id) != 26 || strings.Trim(id, auditIDAlphabet) != "" {
				t.Fatalf("id %q: want 26 characters of %q", id, auditIDAlphabet)
			}
			if seen[id] {
				t.Fatalf("id %q made twice", id)
			}
			seen[id] = true
			if i == 0 || id < first {
				first = id
			}
			if id > last {
				last = id
			}
		}
		if first <= prev {
			t.Errorf("an id made at %v (%q) sorts before or at one made earlier (%q)", tm, first, prev)
		}
		if first[:10] != last[:10] {
			t.Errorf("ids made at %v differ in their time part: %q, %q", tm, first, last)
		}
		prev = last
	}
	if a, b := NewAuditID(), NewAuditID(); a == b || a[:10] > b[:10] {
		t.Errorf("NewAuditID: %q then %q", a, b)
	}
}
