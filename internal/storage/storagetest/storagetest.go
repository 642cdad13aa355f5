// Package storagetest is the contract every storage.Backend passes, run by each backend's tests
// against a real server (OpenSSH's sshd for sftp, versitygw for s3): what the package
// documentation of storage promises, asserted the same way for every kind.
package storagetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sshapi/sshapi/internal/storage"
)

// Harness gives the suite fresh backends and a way to see what a backend left behind.
type Harness struct {
	// New returns a backend on an empty root.
	New func(t *testing.T) storage.Backend
	// Leftovers counts what unfinished uploads left on the server (temporary files,
	// incomplete multipart uploads); every test ends expecting 0.
	Leftovers func(t *testing.T, b storage.Backend) int
}

// Run runs the contract.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b storage.Backend)
	}{
		{"Capabilities", testCapabilities},
		{"StatMissing", testStatMissing},
		{"OpenVersion", testOpenVersion},
		{"UploadParts", testUploadParts},
		{"UploadEmpty", testUploadEmpty},
		{"Parents", testParents},
		{"AbortLeavesNothing", testAbort},
		{"CorruptPartRefused", testCorruptPart},
		{"Overwrite", testOverwrite},
		{"ListPages", testListPages},
		{"ListErrors", testListErrors},
		{"Mkdir", testMkdir},
		{"Remove", testRemove},
		{"RenameAndCopy", testRenameCopy},
		{"ResumeConfirmsParts", testResume},
		{"ResumeGone", testResumeGone},
		{"ResumeAbortLeavesNothing", testResumeAbort},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := h.New(t)
			tc.fn(t, b)
			if h.Leftovers != nil {
				if n := h.Leftovers(t, b); n != 0 {
					t.Fatalf("%d unfinished uploads left on the server", n)
				}
			}
		})
	}
}

// data returns n pseudo-random bytes.
func data(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// partSizes cuts n bytes into parts the backend accepts.
func partSizes(b storage.Backend, n int) []int {
	size := max(int(b.Capabilities().MinPartSize), 1<<20)
	var out []int
	for n > size {
		out = append(out, size)
		n -= size
	}
	return append(out, n)
}

// put writes content to p in parts, concurrently and out of order, and commits.
func put(t *testing.T, b storage.Backend, p string, content []byte, overwrite bool) (*storage.Entry, error) {
	t.Helper()
	ctx := t.Context()
	up, err := b.Create(ctx, p, storage.UploadOptions{Size: int64(len(content)), Overwrite: overwrite, Parents: true})
	if err != nil {
		return nil, err
	}
	sizes := partSizes(b, len(content))
	var wg sync.WaitGroup
	errs := make([]error, len(sizes))
	for i := len(sizes) - 1; i >= 0; i-- { // last part first
		start := 0
		for _, s := range sizes[:i] {
			start += s
		}
		part := content[start : start+sizes[i]]
		sum := sha256.Sum256(part)
		wg.Go(func() {
			errs[i] = up.WritePart(ctx, i+1, int64(start), bytes.NewReader(part), int64(len(part)), sum[:])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = up.Abort(ctx)
		return nil, err
	}
	return up.Commit(ctx)
}

func mustPut(t *testing.T, b storage.Backend, p string, content []byte) {
	t.Helper()
	if _, err := put(t, b, p, content, false); err != nil {
		t.Fatalf("put %s: %v", p, err)
	}
}

func read(t *testing.T, b storage.Backend, p string, off, n int64) []byte {
	t.Helper()
	rc, err := b.Open(t.Context(), p, off, n, "")
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return got
}

// testOpenVersion: a read of a version (Open's etag) reads it while it is the file's, and is
// ErrChanged, reading nothing, once the file is another version, whatever the range; a
// backend whose entries carry no ETag refuses any.
func testOpenVersion(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	v1 := data(3000, 1)
	e1, err := put(t, b, "/v", v1, false)
	if err != nil {
		t.Fatal(err)
	}
	ranges := []struct{ off, n int64 }{{0, -1}, {0, 0}, {10, 100}, {2990, -1}, {3000, -1}, {5000, 10}}
	if e1.ETag == "" {
		if _, err := b.Open(ctx, "/v", 0, -1, `"some-version"`); !errors.Is(err, storage.ErrChanged) {
			t.Fatalf("open with an ETag on a backend without them: %v, want storage.ErrChanged", err)
		}
		return
	}
	for _, r := range ranges {
		rc, err := b.Open(ctx, "/v", r.off, r.n, e1.ETag)
		if err != nil {
			t.Fatalf("open %d+%d of the current version: %v", r.off, r.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		end := min(int64(len(v1)), r.off+r.n)
		if r.n < 0 {
			end = int64(len(v1))
		}
		if want := v1[min(r.off, end):end]; err != nil || !bytes.Equal(got, want) {
			t.Fatalf("open %d+%d of the current version: %d bytes, %v; want %d bytes", r.off, r.n, len(got), err, len(want))
		}
	}
	e2, err := put(t, b, "/v", data(3000, 2), true)
	if err != nil {
		t.Fatal(err)
	}
	if e2.ETag == e1.ETag {
		t.Fatalf("two contents, one ETag %s", e1.ETag)
	}
	for _, r := range ranges {
		if rc, err := b.Open(ctx, "/v", r.off, r.n, e1.ETag); !errors.Is(err, storage.ErrChanged) {
			if err == nil {
				got, _ := io.ReadAll(rc)
				rc.Close()
				t.Fatalf("open %d+%d of the replaced version read %d bytes, want storage.ErrChanged", r.off, r.n, len(got))
			}
			t.Fatalf("open %d+%d of the replaced version: %v, want storage.ErrChanged", r.off, r.n, err)
		}
	}
}

func testCapabilities(t *testing.T, b storage.Backend) {
	c := b.Capabilities()
	if c.Kind == "" {
		t.Fatal("no kind")
	}
	if c.MaxPartSize != 0 && c.MinPartSize > c.MaxPartSize {
		t.Fatalf("min part %d > max part %d", c.MinPartSize, c.MaxPartSize)
	}
}

// testParents: with Directories, a missing parent is refused unless Parents asks for it.
func testParents(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	up, err := b.Create(ctx, "/no/parent", storage.UploadOptions{Size: 0})
	if b.Capabilities().Can(storage.Directories) {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("create below a missing directory: %v, want fs.ErrNotExist", err)
		}
	} else if err != nil {
		t.Fatal(err)
	} else if err := up.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if up, err = b.Create(ctx, "/no/parent", storage.UploadOptions{Size: 0, Parents: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Stat(ctx, "/no"); err != nil || e.Type != storage.TypeDir {
		t.Fatalf("parent after create with Parents: %+v %v", e, err)
	}
}

func testStatMissing(t *testing.T, b storage.Backend) {
	for _, p := range []string{"/nope", "/no/such/dir/file"} {
		if _, err := b.Stat(t.Context(), p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat %s: %v, want fs.ErrNotExist", p, err)
		}
		if _, err := b.Open(t.Context(), p, 0, -1, ""); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("open %s: %v, want fs.ErrNotExist", p, err)
		}
	}
	if e, err := b.Stat(t.Context(), "/"); err != nil || e.Type != storage.TypeDir {
		t.Fatalf("stat /: %+v %v", e, err)
	}
}

// testUploadParts: parts written concurrently and out of order make the file, which appears only
// at Commit; whole and ranged reads return its bytes.
func testUploadParts(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	content := data(2*max(int(b.Capabilities().MinPartSize), 1<<20)+12345, 1)
	if err := b.Mkdir(ctx, "/d", true); err != nil {
		t.Fatal(err)
	}
	up, err := b.Create(ctx, "/d/a.bin", storage.UploadOptions{Size: int64(len(content))})
	if err != nil {
		t.Fatal(err)
	}
	sizes := partSizes(b, len(content))
	off := 0
	for i, s := range sizes {
		if err := up.WritePart(ctx, i+1, int64(off), bytes.NewReader(content[off:off+s]), int64(s), nil); err != nil {
			t.Fatal(err)
		}
		off += s
		if _, err := b.Stat(ctx, "/d/a.bin"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the file is visible before Commit: %v", err)
		}
	}
	e, err := up.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e.Size != int64(len(content)) || e.Type != storage.TypeFile || e.Name != "a.bin" {
		t.Fatalf("committed entry %+v", e)
	}
	if strings.HasSuffix(e.Checksum, fmt.Sprintf("-%d", len(sizes))) { // a composite checksum: the parts' sums
		var sums [][]byte
		for off, i := 0, 0; i < len(sizes); off, i = off+sizes[i], i+1 {
			s := sha256.Sum256(content[off : off+sizes[i]])
			sums = append(sums, s[:])
		}
		if want := storage.CompositeSHA256(sums); e.Checksum != want {
			t.Fatalf("composite checksum %s, want %s", e.Checksum, want)
		}
	}
	if got := read(t, b, "/d/a.bin", 0, -1); !bytes.Equal(got, content) {
		t.Fatalf("read back %d bytes, differ from the %d written", len(got), len(content))
	}
	for _, r := range [][2]int64{{0, 1}, {100, 1000}, {int64(len(content)) - 7, 7}, {int64(len(content)) - 7, -1}, {int64(len(content)), -1}} {
		want := content[r[0]:]
		if r[1] >= 0 {
			want = content[r[0] : r[0]+r[1]]
		}
		if got := read(t, b, "/d/a.bin", r[0], r[1]); !bytes.Equal(got, want) {
			t.Fatalf("range %v: %d bytes, want %d", r, len(got), len(want))
		}
	}
	// Concurrent, out of order, through put.
	content2 := data(len(content), 2)
	mustPut(t, b, "/d/b.bin", content2)
	if got := read(t, b, "/d/b.bin", 0, -1); !bytes.Equal(got, content2) {
		t.Fatal("concurrent out-of-order parts read back wrong")
	}
}

func testUploadEmpty(t *testing.T, b storage.Backend) {
	up, err := b.Create(t.Context(), "/empty", storage.UploadOptions{Size: 0})
	if err != nil {
		t.Fatal(err)
	}
	e, err := up.Commit(t.Context())
	if err != nil || e.Size != 0 {
		t.Fatalf("empty commit: %+v %v", e, err)
	}
	if got := read(t, b, "/empty", 0, -1); len(got) != 0 {
		t.Fatalf("empty file reads %d bytes", len(got))
	}
}

func testAbort(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	up, err := b.Create(ctx, "/x.bin", storage.UploadOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	part := data(1000, 3)
	if err := up.WritePart(ctx, 1, 0, bytes.NewReader(part), int64(len(part)), nil); err != nil {
		t.Fatal(err)
	}
	if err := up.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/x.bin"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("aborted upload is visible: %v", err)
	}
	page, err := b.List(ctx, "/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 0 {
		t.Fatalf("aborted upload left %+v", page.Entries)
	}
}

// testCorruptPart: a part whose bytes do not match its digest is refused; written again right,
// the upload completes with the right content.
func testCorruptPart(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	part := data(4096, 4)
	sum := sha256.Sum256(part)
	bad := slices.Clone(part)
	bad[100] ^= 0xff
	up, err := b.Create(ctx, "/c.bin", storage.UploadOptions{Size: int64(len(part))})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.WritePart(ctx, 1, 0, bytes.NewReader(bad), int64(len(bad)), sum[:]); err == nil {
		t.Fatal("a corrupt part was accepted")
	}
	if err := up.WritePart(ctx, 1, 0, bytes.NewReader(part), int64(len(part)), sum[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(t, b, "/c.bin", 0, -1); !bytes.Equal(got, part) {
		t.Fatal("content differs after a corrupt part was resent")
	}
}

func testOverwrite(t *testing.T, b storage.Backend) {
	mustPut(t, b, "/o", []byte("one"))
	if _, err := put(t, b, "/o", []byte("two"), false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("upload over an existing file without overwrite: %v, want fs.ErrExist", err)
	}
	if _, err := put(t, b, "/o", []byte("three"), true); err != nil {
		t.Fatal(err)
	}
	if got := read(t, b, "/o", 0, -1); string(got) != "three" {
		t.Fatalf("after overwrite: %q", got)
	}
}

// testListPages: a directory listed page by page by cursor gives every entry once, in name order,
// directories as directories.
func testListPages(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	var want []string
	for i := range 25 {
		name := fmt.Sprintf("f%02d", i)
		mustPut(t, b, "/l/"+name, []byte(name))
		want = append(want, name)
	}
	for i := range 3 {
		name := fmt.Sprintf("d%d", i)
		mustPut(t, b, "/l/"+name+"/inner", []byte("x"))
		want = append(want, name)
	}
	sort.Strings(want)
	var got []string
	types := map[string]storage.Type{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("listing does not end")
		}
		page, err := b.List(ctx, "/l", cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Entries) > 7 {
			t.Fatalf("page of %d entries, limit 7", len(page.Entries))
		}
		for _, e := range page.Entries {
			got = append(got, e.Name)
			types[e.Name] = e.Type
			if e.Path != "/l/"+e.Name {
				t.Fatalf("entry path %q for name %q", e.Path, e.Name)
			}
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v\nwant %v", got, want)
	}
	if types["d1"] != storage.TypeDir || types["f03"] != storage.TypeFile {
		t.Fatalf("types %v", types)
	}
}

func testListErrors(t *testing.T, b storage.Backend) {
	if _, err := b.List(t.Context(), "/missing", "", 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("list of a missing directory: %v", err)
	}
	mustPut(t, b, "/file", []byte("x"))
	if _, err := b.List(t.Context(), "/file", "", 0); !errors.Is(err, storage.ErrNotDir) {
		t.Fatalf("list of a file: %v, want ErrNotDir", err)
	}
}

func testMkdir(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	if err := b.Mkdir(ctx, "/m", false); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Stat(ctx, "/m"); err != nil || e.Type != storage.TypeDir {
		t.Fatalf("stat of a new directory: %+v %v", e, err)
	}
	if page, err := b.List(ctx, "/m", "", 0); err != nil || len(page.Entries) != 0 {
		t.Fatalf("new directory lists %+v %v", page, err)
	}
	if err := b.Mkdir(ctx, "/m", false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("mkdir of an existing directory: %v, want fs.ErrExist", err)
	}
	if err := b.Mkdir(ctx, "/m", true); err != nil {
		t.Fatalf("mkdir -p of an existing directory: %v", err)
	}
	if err := b.Mkdir(ctx, "/p/q/r", true); err != nil {
		t.Fatal(err)
	}
	if e, err := b.Stat(ctx, "/p/q/r"); err != nil || e.Type != storage.TypeDir {
		t.Fatalf("mkdir -p: %+v %v", e, err)
	}
	mustPut(t, b, "/f", []byte("x"))
	if err := b.Mkdir(ctx, "/f/sub", true); err == nil {
		t.Fatal("mkdir below a file succeeded")
	}
}

func testRemove(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	mustPut(t, b, "/r/a", []byte("a"))
	mustPut(t, b, "/r/s/b", []byte("b"))
	if err := b.Remove(ctx, "/r", false); !errors.Is(err, storage.ErrNotEmpty) {
		t.Fatalf("non-recursive removal of a non-empty directory: %v, want ErrNotEmpty", err)
	}
	if err := b.Remove(ctx, "/r/a", false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/r/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removed file: %v", err)
	}
	if err := b.Remove(ctx, "/r", true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/r"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removed tree: %v", err)
	}
	if err := b.Remove(ctx, "/r", true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removing a missing path: %v", err)
	}
}

func testRenameCopy(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	content := data(3000, 5)
	mustPut(t, b, "/a", content)
	if err := b.Copy(ctx, "/a", "/c", false); err != nil {
		t.Fatal(err)
	}
	if got := read(t, b, "/c", 0, -1); !bytes.Equal(got, content) {
		t.Fatal("copy differs")
	}
	if err := b.Rename(ctx, "/a", "/b", false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("renamed source still there: %v", err)
	}
	if got := read(t, b, "/b", 0, -1); !bytes.Equal(got, content) {
		t.Fatal("renamed file differs")
	}
	if err := b.Copy(ctx, "/b", "/c", false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("copy onto an existing file without overwrite: %v", err)
	}
	if err := b.Rename(ctx, "/b", "/c", false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("rename onto an existing file without overwrite: %v", err)
	}
	if err := b.Rename(ctx, "/b", "/c", true); err != nil {
		t.Fatal(err)
	}
}

// written writes parts of content (numbers from 1, sizes from partSizes) and returns them as
// the caller would record them.
func written(t *testing.T, up storage.Upload, content []byte, sizes []int, numbers ...int) []storage.Part {
	t.Helper()
	var out []storage.Part
	for _, n := range numbers {
		off := 0
		for _, s := range sizes[:n-1] {
			off += s
		}
		b := content[off : off+sizes[n-1]]
		sum := sha256.Sum256(b)
		if err := up.WritePart(t.Context(), n, int64(off), bytes.NewReader(b), int64(len(b)), sum[:]); err != nil {
			t.Fatal(err)
		}
		out = append(out, storage.Part{Number: n, Offset: int64(off), Size: int64(len(b)), SHA256: sum[:]})
	}
	return out
}

// testResume: an upload reopened by its ID (as after a crash) confirms the parts that were
// written and not one that was only claimed; the remaining part completes it with the right
// content.
func testResume(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	content := data(2*max(int(b.Capabilities().MinPartSize), 1<<20)+4321, 6)
	sizes := partSizes(b, len(content))
	if len(sizes) != 3 {
		t.Fatalf("%d parts", len(sizes))
	}
	opts := storage.UploadOptions{Size: int64(len(content)), Parents: true}
	up, err := b.Create(ctx, "/r/big", opts)
	if err != nil {
		t.Fatal(err)
	}
	id, err := up.ID(ctx)
	if err != nil || id == "" {
		t.Fatalf("upload id %q: %v", id, err)
	}
	known := written(t, up, content, sizes, 2, 1)
	if got := up.Parts(); len(got) != 2 || got[0].Number != 1 || got[1].Number != 2 {
		t.Fatalf("parts of the first upload: %+v", got)
	}
	// The first Upload is dropped without Commit or Abort, as a killed process drops it.
	claimed := slices.Clone(known)
	last := content[sizes[0]+sizes[1]:]
	lastSum := sha256.Sum256(last)
	claimed = append(claimed, storage.Part{Number: 3, Offset: int64(sizes[0] + sizes[1]), Size: int64(len(last)), SHA256: lastSum[:]})
	re, err := b.Resume(ctx, "/r/big", id, claimed, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := re.Parts()
	if len(got) != 2 || got[0].Number != 1 || got[1].Number != 2 || !bytes.Equal(got[1].SHA256, known[0].SHA256) {
		t.Fatalf("resumed upload confirms %+v, want parts 1 and 2", got)
	}
	if rid, err := re.ID(ctx); err != nil || rid != id {
		t.Fatalf("resumed upload id %q %v, want %q", rid, err, id)
	}
	written(t, re, content, sizes, 3)
	if _, err := re.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(t, b, "/r/big", 0, -1); !bytes.Equal(got, content) {
		t.Fatal("resumed upload reads back wrong")
	}
}

// testResumeGone: a committed or aborted upload cannot be resumed.
func testResumeGone(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	for _, commit := range []bool{true, false} {
		p := fmt.Sprintf("/g%v", commit)
		up, err := b.Create(ctx, p, storage.UploadOptions{Size: 10})
		if err != nil {
			t.Fatal(err)
		}
		id, err := up.ID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		known := written(t, up, []byte("0123456789"), []int{10}, 1)
		if commit {
			_, err = up.Commit(ctx)
		} else {
			err = up.Abort(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Resume(ctx, p, id, known, storage.UploadOptions{Size: 10, Overwrite: true}); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("resume after commit=%v: %v, want fs.ErrNotExist", commit, err)
		}
	}
}

// testResumeAbort: aborting a resumed upload leaves nothing, which is how leftovers of a
// crashed process are reaped.
func testResumeAbort(t *testing.T, b storage.Backend) {
	ctx := t.Context()
	up, err := b.Create(ctx, "/a.bin", storage.UploadOptions{Size: 1000})
	if err != nil {
		t.Fatal(err)
	}
	id, err := up.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	written(t, up, data(1000, 7), []int{1000}, 1)
	re, err := b.Resume(ctx, "/a.bin", id, nil, storage.UploadOptions{Size: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(re.Parts()) != 0 {
		t.Fatalf("resume with no known parts confirms %+v", re.Parts())
	}
	if err := re.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "/a.bin"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("aborted upload is visible: %v", err)
	}
}
