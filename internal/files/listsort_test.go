package files

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pkg/sftp"
)

// TestSortedTopKPage: a page of topK in size or time order (either direction) is exactly that
// slice of every entry offered sorted the same way with ties broken by name, for windows
// smaller than the directory (so trims and the cut record are exercised) and deep pages.
func TestSortedTopKPage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type ent struct {
		name        string
		size, mtime int
	}
	var ents []ent
	for i := range 20_000 {
		// Few distinct sizes and times: ties are common, so the name tie-break matters.
		ents = append(ents, ent{fmt.Sprintf("f%05d", (i*7919)%20_000), rng.IntN(50), rng.IntN(30)})
	}
	tests := []struct {
		by   SortKey
		desc bool
		k    int
		from int
	}{
		{SortSize, false, 100, 0},
		{SortSize, true, 100, 50},
		{SortTime, false, 5000, 4800},
		{SortTime, true, 1, 0},
		{SortName, true, 300, 200},
		{SortSize, false, 30_000, 19_990},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s desc=%v k=%d from=%d", tc.by, tc.desc, tc.k, tc.from), func(t *testing.T) {
			top := newSortedTopK(tc.k, "", tc.by, tc.desc)
			for _, e := range ents {
				d := dirent{name: []byte(e.name), st: sftp.FileStat{Size: uint64(e.size), Mtime: uint32(e.mtime), Mode: sIFREG | 0o644}}
				top.add(&d, d.name, "")
			}
			want := slices.Clone(ents)
			slices.SortFunc(want, func(a, b ent) int {
				c := 0
				switch tc.by {
				case SortSize:
					c = cmp.Compare(a.size, b.size)
				case SortTime:
					c = cmp.Compare(a.mtime, b.mtime)
				}
				if c == 0 {
					c = cmp.Compare(a.name, b.name)
				}
				if tc.desc {
					c = -c
				}
				return c
			})
			want = want[:min(len(want), tc.k)][min(tc.from, min(len(want), tc.k)):]
			page := top.page("/d", tc.from)
			if top.total != len(ents) || top.more != (len(ents) > tc.k) {
				t.Fatalf("total %d more %v", top.total, top.more)
			}
			if len(page) != len(want) {
				t.Fatalf("%d entries, want %d", len(page), len(want))
			}
			for i, e := range page {
				if e.Name != want[i].name || e.Size != int64(want[i].size) || e.ModTime.Unix() != int64(want[i].mtime) {
					t.Fatalf("entry %d: %s %d %v, want %+v", i, e.Name, e.Size, e.ModTime.Unix(), want[i])
				}
			}
		})
	}
}
