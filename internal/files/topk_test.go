package files

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// TestTopKPage: the page topK returns is exactly the sorted, filtered and cut list of every
// name offered, with each entry's attributes, for names sharing long prefixes, names that are
// prefixes of others, bytes above 0x7f and names differing only past the 8-byte key, for
// windows smaller and larger than the directory (so trims happen, repeatedly) and with after.
func TestTopKPage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"", "a", "b", "run-0000", "run-0001", "\xff", "\x01", "zz", "é", "-", "."}
	var names []string
	seen := map[string]bool{}
	for len(names) < 5000 {
		var sb strings.Builder
		for range 1 + rng.IntN(5) {
			sb.WriteString(pieces[rng.IntN(len(pieces))])
		}
		if n := sb.String(); n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	longPrefix := make([]string, 3000)
	for i := range longPrefix {
		longPrefix[i] = fmt.Sprintf("simulation_output_%07d.dat", (i*7919)%3000)
	}
	sorted := func(ns []string) []string { s := slices.Clone(ns); slices.Sort(s); return s }
	tests := []struct {
		name  string
		names []string
		k     int
		from  int
		after string
		dir   string
	}{
		{"all", names, 10_000, 0, "", "/d"},
		{"window below the size", names, 100, 0, "", "/d"},
		{"deep page", names, 2500, 2400, "", "/"},
		{"one", names, 1, 0, "", "/d"},
		{"after", names, 300, 10, "run-0000a", "/d"},
		{"after the last", names, 300, 0, "\xff\xff\xff\xff\xff\xff", "/d"},
		{"long common prefix", longPrefix, 1000, 0, "", "/d"},
		{"long common prefix, all", longPrefix, 5000, 0, "", "/d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			top := newTopK(tc.k, tc.after)
			for i, n := range tc.names {
				d := dirent{name: []byte(n), st: sftp.FileStat{Size: uint64(i), Mode: sIFREG | 0o640, Mtime: uint32(i), UID: uint32(i), GID: 7}}
				abs := ""
				if i%3 == 0 {
					d.st.Mode, d.link = sIFLNK|0o777, []byte("target of "+n)
				}
				if i%5 == 0 {
					abs = "/elsewhere/" + n
				}
				top.add(&d, d.name, abs)
			}
			var want []string
			for _, n := range sorted(tc.names) {
				if tc.after == "" || n > tc.after {
					want = append(want, n)
				}
			}
			more := len(want) > tc.k
			want = want[:min(len(want), tc.k)]
			want = want[min(len(want), tc.from):]
			page := top.page(tc.dir, tc.from)
			if top.total != len(tc.names) || top.more != more {
				t.Fatalf("total %d more %v, want %d %v", top.total, top.more, len(tc.names), more)
			}
			if len(page) != len(want) {
				t.Fatalf("%d entries, want %d", len(page), len(want))
			}
			index := map[string]int{}
			for i, n := range tc.names {
				index[n] = i
			}
			for j, e := range page {
				i := index[e.Name]
				w := Entry{Name: want[j], Path: strings.TrimSuffix(tc.dir, "/") + "/" + want[j], Type: TypeFile, Size: int64(i), Mode: "0640",
					ModTime: time.Unix(int64(i), 0).UTC(), UID: uint32(i), GID: 7}
				if i%3 == 0 {
					w.Type, w.Mode, w.LinkTarget = TypeSymlink, "0777", "target of "+want[j]
				}
				if i%5 == 0 {
					w.Path = "/elsewhere/" + want[j]
				}
				if e != w {
					t.Fatalf("entry %d:\n got %+v\nwant %+v", j, e, w)
				}
			}
		})
	}
}

// TestPlainName: names page may join to their directory with a slash, and the others.
func TestPlainName(t *testing.T) {
	for name, plain := range map[string]bool{"a": true, "..a": true, ".a": true, "...": true, "": false, ".": false, "..": false, "a/b": false, "/": false} {
		if got := plainName([]byte(name)); got != plain {
			t.Errorf("plainName(%q) = %v", name, got)
		}
		if want := childPath("/d", name); plain && want != "/d/"+name {
			t.Errorf("childPath(/d, %q) = %q", name, want)
		}
	}
}
