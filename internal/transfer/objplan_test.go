package transfer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/storage"
)

// TestWalkBackendPages walks a bucket prefix page by page (pages of 7 entries here, 1000 in
// a run): every object and directory becomes one item, directories before their contents, the
// keys beside the prefix are not included, and a tree beyond the plan limit fails naming it.
func TestWalkBackendPages(t *testing.T) {
	srv := s3test.New(t)
	b := bucket(t, srv, "")
	var want []string
	for i := range 20 {
		p := fmt.Sprintf("/src/f%02d", i)
		if i%5 == 0 {
			p = fmt.Sprintf("/src/d%d/g%02d", i/5, i)
		}
		putBytes(t, b, p, []byte(p))
		want = append(want, p)
	}
	want = append(want, "/src/d0", "/src/d1", "/src/d2", "/src/d3", "/src")
	putBytes(t, b, "/src-beside", []byte("x")) // shares the prefix "/src" as a string
	items, err := walkBackend(t.Context(), b, "/src", "/dst", planLimits{items: 100, pathBytes: 1 << 20}, 7)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	seen := map[string]int{}
	for i, it := range items {
		got = append(got, it.Source)
		seen[it.Source] = i
		if it.Destination != "/dst"+strings.TrimPrefix(it.Source, "/src") {
			t.Fatalf("item %+v: destination", it)
		}
		if it.Seq != int64(i) {
			t.Fatalf("item %d has seq %d", i, it.Seq)
		}
		if it.Kind == KindFile && it.Size != int64(len(it.Source)) {
			t.Fatalf("item %+v: size", it)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("walked %v\nwant %v", got, want)
	}
	for _, it := range items {
		if parent := it.Source[:strings.LastIndex(it.Source, "/")]; it.Source != "/src" && seen[parent] >= seen[it.Source] {
			t.Fatalf("%s comes before its directory %s", it.Source, parent)
		}
	}
	_, err = walkBackend(t.Context(), b, "/src", "/dst", planLimits{items: 10, pathBytes: 1 << 20}, 7)
	if !errors.Is(err, errPlanTooLarge) || !isPermanent(err) || !strings.Contains(err.Error(), "max_plan_items") {
		t.Fatalf("a tree beyond the plan limit: %v", err)
	}
}

// putBytes stores content at p of b in one part.
func putBytes(t *testing.T, b storage.Backend, p string, content []byte) {
	t.Helper()
	up, err := b.Create(t.Context(), p, storage.UploadOptions{Size: int64(len(content)), Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.WritePart(t.Context(), 1, 0, strings.NewReader(string(content)), int64(len(content)), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}
