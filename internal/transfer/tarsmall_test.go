package transfer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
