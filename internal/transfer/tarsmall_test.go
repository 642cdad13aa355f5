package transfer

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestTarBatchNamesModesLinks copies through a tar batch files whose names tar could take for
// options or mangle, files of modes that are written owner-only first (group-writable,
// owner-unreadable is left out: sha256sum could not read it at the source either), and two hard
// links to one file, and checks every copy's content, mode and modification time, that no
// option named by a file ran, that no temporary file is left, and that the files went through
// tar (the tar counter).
func TestTarBatchNamesModesLinks(t *testing.T) {
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	root := filepath.Join(srcDir, "tree")
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]os.FileMode{
		"-x": 0o644, "--checkpoint=1": 0o600, "--checkpoint-action=exec=touch PWNED": 0o644,
		"new\nline": 0o640, "quote'd \"name\"": 0o644, strings.Repeat("long", 50): 0o644,
		"sub/world-writable": 0o666, "sub/group-writable": 0o664, "sub/exec": 0o755, "sub/read-only": 0o444,
		"empty": 0o644,
	}
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	i := 0
	for name, mode := range files {
		p := filepath.Join(root, name)
		content := bytes.Repeat([]byte(fmt.Sprintf("%d:%s;", i, name)), i*37)
		i++
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		owned(t, a, p)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(root, "-x"), filepath.Join(root, "sub", "hardlink")); err != nil {
		t.Fatal(err)
	}
	files["sub/hardlink"] = 0o644
	owned(t, a, root, filepath.Join(root, "sub"))
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "copy")}, Recursive: true})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesDone != int64(len(files)) {
		t.Fatalf("transfer %+v", tr)
	}
	for name, mode := range files {
		want, _ := os.ReadFile(filepath.Join(root, name))
		p := filepath.Join(dstDir, "copy", name)
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%q: %v (got %d bytes, want %d)", name, err, len(got), len(want))
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != mode || !fi.ModTime().Equal(mtime) {
			t.Errorf("%q: mode %v mtime %v, want regular %v %v (%v)", name, fi.Mode(), fi.ModTime(), mode, mtime, err)
		}
	}
	for _, home := range []string{a.Home, b.Home} {
		if _, err := os.Stat(filepath.Join(home, "PWNED")); err == nil {
			t.Error("a file name ran as a tar option")
		}
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Errorf("temporary files left: %q", left)
	}
	if n := testutil.ToFloat64(h.eng.metrics.tarFiles); n != float64(len(files)) {
		t.Errorf("%v files went through tar, want %d", n, len(files))
	}
}

// TestTarBatchesGrow copies a tree of 1,000 small files with BatchFiles 4 (a walk's first chunk
// 64 items, at most 256 per chunk and tar batch) and counts the source's commands, one tar -c per
// batch: the chunks grow 64, 128, 256, 256, 256 and the rest, so six batches, where batches of
// a fixed 64 files took sixteen; every file arrives once and whole.
func TestTarBatchesGrow(t *testing.T) {
	h := newHarness(t, streamConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	const n = 1000
	root := smallTree(t, a, n)
	dst := filepath.Join(b.MkTemp(t), "copy")
	before := strings.Count(a.Log(), "Starting session: command")
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
		Destination: Endpoint{System: "b", Path: dst}, Recursive: true, Verify: VerifySHA256})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesDone != n {
		t.Fatalf("transfer %+v", tr)
	}
	sameFiles(t, root, dst, nil)
	if cmds := strings.Count(a.Log(), "Starting session: command") - before; cmds != 6 {
		t.Errorf("the source ran %d commands (tar batches), want 6", cmds)
	}
	if got := testutil.ToFloat64(h.eng.metrics.tarFiles); got != n {
		t.Errorf("%v files went through tar, want %d", got, n)
	}
}

// TestTarRewriteAllocations rewrites a source archive of 512 members of 4 KiB and bounds what
// that allocates per member: one copy buffer and one hash serve the whole batch, where io.Copy's
// 32 KiB buffer per member made a tree of small files allocate gigabytes.
func TestTarRewriteAllocations(t *testing.T) {
	h := newHarness(t, testConfig())
	r := &run{e: h.eng, t: &Transfer{ID: "alloc"}}
	const n = 512
	var src bytes.Buffer
	tw := tar.NewWriter(&src)
	batch := make([]*Item, n)
	want := map[string][]int{}
	content := bytes.Repeat([]byte("x"), 4<<10)
	for i := range n {
		name := fmt.Sprintf("/src/f%04d", i)
		batch[i] = &Item{Kind: KindFile, Source: name, Destination: fmt.Sprintf("/dst/f%04d", i), Size: 4 << 10, mode: 0o644}
		want[name] = []int{i}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	moved, sums := make([]attrsDone, n), make([]string, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := r.tarRewrite(bytes.NewReader(src.Bytes()), io.Discard, batch, want, moved, sums); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	wantSum := fmt.Sprintf("%x", sha256.Sum256(content))
	for i := range n {
		if moved[i] == 0 || sums[i] != wantSum {
			t.Fatalf("member %d: moved %v sum %s, want %s", i, moved[i], sums[i], wantSum)
		}
	}
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 8<<10 {
		t.Errorf("%d bytes allocated per member, want at most %d", per, 8<<10)
	}
}
