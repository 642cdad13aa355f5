package transfer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestDestSumStreamsInRangeOrder: the destination hashes a file's ranges as the written prefix
// grows, whatever order they land in; the digest is the whole file's only when every range was
// fed, and the verification takes a streamed digest only when it equals the source's (a wrong
// one is hashed again, so it cannot fail a good copy or pass a bad one).
func TestDestSumStreamsInRangeOrder(t *testing.T) {
	h := newHarness(t, testConfig())
	d := sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "d", d, "")
	sys, err := h.sys.Resolve(t.Context(), "alice", "d")
	if err != nil {
		t.Fatal(err)
	}
	dir := d.MkTemp(t)
	const chunk = 1 << 20
	size := int64(5*chunk + 12345)
	cfg := testConfig()
	cfg.setDefaults()
	newRun := func() *run {
		return &run{
			e: &Engine{cfg: cfg, pool: h.pool, log: h.eng.log}, t: &Transfer{ID: "tr-ds", Verify: VerifySHA256, ChunkSize: chunk},
			dst: sys, dstR: runner{pool: h.pool, t: sys.Target}, srcR: runner{pool: h.pool, t: sys.Target},
			ranges: map[int64]map[int]bool{},
		}
	}
	for _, tc := range []struct {
		name  string
		order []int // ranges reported written, in this order
		whole bool  // the digest must be the whole file's
	}{
		{"in order", []int{0, 1, 2, 3, 4, 5}, true},
		{"out of order", []int{3, 1, 5, 0, 4, 2}, true},
		{"repeated", []int{0, 0, 1, 2, 2, 3, 4, 5, 5}, true},
		{"a range missing", []int{0, 1, 2, 4, 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun()
			it := &Item{Seq: 1, Source: filepath.Join(dir, "src-"+tc.name), Destination: filepath.Join(dir, "dst-"+tc.name), Size: size}
			want := randomFile(t, it.Source, size, 3)
			src, err := os.ReadFile(it.Source)
			if err != nil {
				t.Fatal(err)
			}
			// The temporary file starts as zeros, sized in advance, and each range is written
			// just before it is reported: a range fed before the ones ahead of it are written
			// would be hashed as zeros.
			tmp, err := os.Create(tempName(it.Destination, r.t.ID))
			if err != nil {
				t.Fatal(err)
			}
			defer tmp.Close()
			if err := tmp.Truncate(size); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			ds := r.newDestSum(t.Context(), it, &wg)
			if ds == nil {
				t.Fatal("no streamed sum for a sha256 transfer with 1 MiB ranges")
			}
			<-ds.started // a sum asked for before its command started is not waited for
			for _, idx := range tc.order {
				off := int64(idx) * chunk
				if _, err := tmp.WriteAt(src[off:min(off+chunk, size)], off); err != nil {
					t.Fatal(err)
				}
				ds.rangeDone(idx)
			}
			got := ds.sum(t.Context(), cfg.CommandTimeout)
			ds.close()
			wg.Wait()
			if tc.whole && got != want {
				t.Fatalf("streamed sum %q, want the file's %s", got, want)
			}
			if !tc.whole && got != "" {
				t.Fatalf("streamed sum %q with a range never fed, want none", got)
			}
		})
	}
	t.Run("verification", func(t *testing.T) {
		r := newRun()
		it := &Item{Seq: 1, Source: filepath.Join(dir, "vsrc"), Destination: filepath.Join(dir, "vdst"), Size: size}
		tmp := tempName(it.Destination, r.t.ID)
		want := randomFile(t, it.Source, size, 4)
		randomFile(t, tmp, size, 4)
		other := sha256.Sum256([]byte("not the file"))
		wrong := hex.EncodeToString(other[:])
		for _, tc := range []struct {
			name     string
			streamed string
			corrupt  bool // the copy differs from the source from this case on
			ok       bool
		}{
			{"good copy, streamed sum right", want, false, true},
			{"good copy, streamed sum wrong: hashed again", wrong, false, true},
			{"bad copy, no streamed sum", "", true, false},
			{"bad copy, streamed sum wrong", wrong, true, false},
			// The streamed digest stands in for reading the file again: it is the digest of
			// the bytes read back from the destination's disk, so it equals the source's
			// only for a good copy.
			{"streamed sum is used instead of reading again", want, true, true},
		} {
			if tc.corrupt {
				f, err := os.OpenFile(tmp, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = f.WriteAt([]byte("x"), 3*chunk)
				_ = f.Close()
			}
			if tc.streamed != "" {
				r.noteDestSum(tmp, tc.streamed)
			}
			errs, sums := r.verify(t.Context(), nil, []*Item{it})
			switch {
			case tc.ok && (errs[it] != nil || sums[it] != want):
				t.Fatalf("%s: %v, sum %q", tc.name, errs[it], sums[it])
			case !tc.ok && !errors.Is(errs[it], errMismatch):
				t.Fatalf("%s: error %v, want a mismatch", tc.name, errs[it])
			}
			if r.takeDestSum(tmp) != "" {
				t.Fatalf("%s: streamed sum kept after verification", tc.name)
			}
		}
	})
}

func TestSplitTail(t *testing.T) {
	mk := func(n int, size int64) []*rangeTask {
		var ts []*rangeTask
		for i := range n {
			ts = append(ts, &rangeTask{idx: i, off: int64(i) * size, n: size, rs: &rangeState{}})
		}
		return ts
	}
	for _, tc := range []struct {
		name    string
		ranges  int
		size    int64
		streams int
		want    int // tasks after the split
	}{
		{"one stream: no split", 8, 16 << 20, 1, 8},
		{"last wave cut in four", 8, 16 << 20, 4, 4 + 4*4},
		{"fewer ranges than streams", 2, 16 << 20, 4, 2 * 4},
		{"ranges of three blocks", 4, 3 * blockSize, 2, 2 + 2*3},
		{"ranges of one block", 4, blockSize, 2, 4},
		{"short last range", 3, 5*blockSize + 1, 3, 3 * 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := mk(tc.ranges, tc.size)
			out := splitTail(mk(tc.ranges, tc.size), tc.streams)
			if len(out) != tc.want {
				t.Fatalf("%d tasks, want %d", len(out), tc.want)
			}
			// The parts of each range cover it exactly, in order, on block boundaries, and
			// their count is the range's parts.
			next := map[int]int64{}
			count := map[int]int{}
			for _, p := range out {
				r := in[p.idx]
				if p.off != r.off+next[p.idx] || p.n <= 0 || (p.off-r.off)%blockSize != 0 {
					t.Fatalf("range %d: part at %d+%d, want it at %d", p.idx, p.off, p.n, r.off+next[p.idx])
				}
				next[p.idx] += p.n
				count[p.idx]++
			}
			for i, r := range in {
				if next[i] != r.n {
					t.Fatalf("range %d: parts cover %d bytes of %d", i, next[i], r.n)
				}
			}
			for _, p := range out {
				if want := count[p.idx]; want > 1 && p.rs.parts != want || want == 1 && p.rs.parts > 1 {
					t.Fatalf("range %d: %d parts, state counts %d", p.idx, want, p.rs.parts)
				}
			}
		})
	}
}

func TestRangeStatePartDone(t *testing.T) {
	boom := os.ErrDeadlineExceeded
	for _, tc := range []struct {
		name    string
		parts   int
		errs    []error
		wantErr error
	}{
		{"uncut range", 0, []error{nil}, nil},
		{"uncut range fails", 0, []error{boom}, boom},
		{"all parts written", 3, []error{nil, nil, nil}, nil},
		{"a middle part fails", 3, []error{nil, boom, nil}, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &rangeState{parts: tc.parts}
			for i, e := range tc.errs {
				err, last := s.partDone(e)
				if last != (i == len(tc.errs)-1) {
					t.Fatalf("part %d: last %v", i, last)
				}
				if last && err != tc.wantErr {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
			}
		})
	}
}
