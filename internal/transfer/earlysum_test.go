package transfer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sshapi/sshapi/internal/digest"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestSourceSumsOverlapAndAreUsedOnce: sums started while files copy are what verification
// gets (computed once, by the background or by verification, whichever asks first), each is
// used only once, so a file copied again after a mismatch is summed again, and stop clears
// what was never used.
func TestSourceSumsOverlapAndAreUsedOnce(t *testing.T) {
	h := newHarness(t, testConfig())
	a := sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	sys, err := h.sys.Resolve(t.Context(), "alice", "a")
	if err != nil {
		t.Fatal(err)
	}
	dir := a.MkTemp(t)
	var items []*Item
	want := map[string]string{}
	for i, name := range []string{"one.bin", "two.bin", "three.bin"} {
		p := filepath.Join(dir, name)
		want[p] = randomFile(t, p, 3<<20, uint64(i+1))
		items = append(items, &Item{Source: p, Size: 3 << 20})
	}
	cfg := testConfig()
	cfg.setDefaults()
	r := &run{e: &Engine{cfg: cfg}, t: &Transfer{Verify: VerifySHA256}, srcR: runner{pool: h.pool, t: sys.Target}}
	stop := r.startSourceSums(t.Context(), items)
	// The first file is summed in the background; its source then changes, as a file rewritten
	// during its copy would: the early sum (of what was copied) is the one verification gets.
	if _, err := r.early.sums[items[0].Source].compute(t.Context(), r, digest.File{Path: items[0].Source, Size: items[0].Size}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(items[0].Source, []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := []string{items[0].Source, items[1].Source, items[2].Source}
	files := []digest.File{{Path: paths[0], Size: 3 << 20}, {Path: paths[1], Size: 3 << 20}, {Path: paths[2], Size: 3 << 20}}
	sums, errs, err := r.sourceSHA256(t.Context(), files)
	if err != nil || len(errs) != 0 {
		t.Fatalf("source sums: %v %v", err, errs)
	}
	for _, p := range paths {
		if sums[p] != want[p] {
			t.Fatalf("sum of %s: %s, want %s", p, sums[p], want[p])
		}
	}
	// Used once: asking again sums the source as it is now.
	sums, _, err = r.sourceSHA256(t.Context(), files[:1])
	if err != nil || sums[paths[0]] == want[paths[0]] || sums[paths[0]] == "" {
		t.Fatalf("second sum of the changed file: %q %v", sums[paths[0]], err)
	}
	stop()
	if len(r.early.sums) != 0 {
		t.Fatalf("sums left after stop: %d", len(r.early.sums))
	}
}
