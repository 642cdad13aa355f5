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

// TestBatchRenameNames copies a tree of small files, some named as a shell, perl or tar might
// misread (newlines, a trailing newline, quotes, leading dashes, spaces, backslashes), through
// tar batches and checks that every file was renamed into place by a batch command (the
// counter: verified and renamed by one perl with sha256, renamed by one perl otherwise), with
// its content, and that no temporary file is left and no name ran as code.
func TestBatchRenameNames(t *testing.T) {
	for _, v := range []Verify{VerifySHA256, VerifySize, VerifyNone} {
		t.Run(string(v), func(t *testing.T) { testBatchRenameNames(t, v) })
	}
}

func testBatchRenameNames(t *testing.T, verify Verify) {
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	root := filepath.Join(srcDir, "tree")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"-x", "--y", "new\nline", "trail\n", "quote'd \"name\"", "a b", `back\slash`,
		"$(touch PWNED)", "`touch PWNED`", "; touch PWNED", "\x01ctl", "é"}
	for i := len(names); i < 3*renameBatchMin; i++ {
		names = append(names, fmt.Sprintf("f%03d", i))
	}
	for i, name := range names {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte(name), i+1), 0o644); err != nil {
			t.Fatal(err)
		}
		owned(t, a, p)
	}
	owned(t, a, root)
	before := strings.Count(b.Log(), "Starting session: command")
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "copy")}, Recursive: true, Verify: verify})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesDone != int64(len(names)) {
		t.Fatalf("transfer %+v", tr)
	}
	for i, name := range names {
		got, err := os.ReadFile(filepath.Join(dstDir, "copy", name))
		if want := bytes.Repeat([]byte(name), i+1); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%q: %v (got %d bytes, want %d)", name, err, len(got), len(want))
		}
	}
	for _, home := range []string{a.Home, b.Home, dstDir, filepath.Join(dstDir, "copy")} {
		if _, err := os.Stat(filepath.Join(home, "PWNED")); err == nil {
			t.Errorf("a file name ran as code (%s)", home)
		}
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Errorf("temporary files left: %q", left)
	}
	if n := testutil.ToFloat64(h.eng.metrics.renamed); n != float64(len(names)) {
		t.Errorf("%v files renamed by the batch command, want %d", n, len(names))
	}
	// tar -x and one perl (which, with sha256, also hashed the files: no sha256sum).
	if cmds := strings.Count(b.Log(), "Starting session: command") - before; cmds != 2 {
		t.Errorf("the destination ran %d commands, want 2 (tar -x, perl)", cmds)
	}
}

// TestTarBatchSourceSumsFromStream copies a tree of small files in one tar batch with sha256
// verification and checks that the source ran one command, tar: the sources' sums are the
// stream's (tar exited 0), not a second read of every file on the source by sha256sum, and the
// copies are still verified (the destination's sums on disk against them) and whole.
func TestTarBatchSourceSumsFromStream(t *testing.T) {
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	root := filepath.Join(srcDir, "tree")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, 1000+i), 0o644); err != nil {
			t.Fatal(err)
		}
		owned(t, a, p)
	}
	owned(t, a, root)
	before := strings.Count(a.Log(), "Starting session: command")
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "copy")}, Recursive: true, Verify: VerifySHA256})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesDone != n {
		t.Fatalf("transfer %+v", tr)
	}
	for i := range n {
		got, err := os.ReadFile(filepath.Join(dstDir, "copy", fmt.Sprintf("f%02d", i)))
		if want := bytes.Repeat([]byte{byte(i)}, 1000+i); err != nil || !bytes.Equal(got, want) {
			t.Errorf("f%02d: %v", i, err)
		}
	}
	if cmds := strings.Count(a.Log(), "Starting session: command") - before; cmds != 1 {
		t.Errorf("the source ran %d commands, want 1 (tar -c)\n%s", cmds, a.Log())
	}
}
