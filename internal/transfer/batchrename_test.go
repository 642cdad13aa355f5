package transfer

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
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

// TestVerifyRenameHashesWithOpenssl copies a tree through a tar batch to a destination whose perl
// cannot load Digest::SHA (a module of that name on the sessions' PERL5LIB dies, as perl-base
// has none) and checks that the batch was still verified and renamed by the one perl, the
// destination running only tar -x and it: the sums came from openssl, reading the files back
// from disk. Without openssl's sums the perl fails on Digest::SHA and the batch goes to
// sha256sum and renameBatch (more commands). TestVerifyRenameScript checks its judgements.
func TestVerifyRenameHashesWithOpenssl(t *testing.T) {
	lib, err := os.MkdirTemp("", "perl5lib-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(lib) })
	if err := os.MkdirAll(filepath.Join(lib, "Digest"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "Digest", "SHA.pm"), []byte("die \"no Digest::SHA here\\n\";\n1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, testConfig())
	a := sshtest.New(t, sshtest.Options{})
	b := sshtest.New(t, sshtest.Options{ExtraConfig: "SetEnv PERL5LIB=" + lib})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	root := smallTree(t, a, 3*renameBatchMin)
	dst := filepath.Join(b.MkTemp(t), "copy")
	before := strings.Count(b.Log(), "Starting session: command")
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
		Destination: Endpoint{System: "b", Path: dst}, Recursive: true, Verify: VerifySHA256})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesDone != 3*renameBatchMin {
		t.Fatalf("transfer %+v", tr)
	}
	sameFiles(t, root, dst, nil)
	if n := testutil.ToFloat64(h.eng.metrics.renamed); n != 3*renameBatchMin {
		t.Errorf("%v files renamed by the batch command, want %d", n, 3*renameBatchMin)
	}
	if cmds := strings.Count(b.Log(), "Starting session: command") - before; cmds != 2 {
		t.Errorf("the destination ran %d commands, want 2 (tar -x, perl)\n%s", cmds, b.Log())
	}
}

// TestVerifyRenameScript runs the verify-and-rename perl on this machine over a file whose sum
// matches, one whose copy differs from the source's sum, one that is missing, and matching ones
// whose names openssl would escape (a backslash, a newline: hashed by Digest::SHA instead) or
// that are relative (not given to openssl): only the matching ones are renamed, the others
// judged "-" or "!" and left where they are.
func TestVerifyRenameScript(t *testing.T) {
	dir := t.TempDir()
	type file struct {
		name, content, sum string
		missing            bool
		want               string // the line's judgement: "0", "-" or "!"
	}
	sum := func(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }
	files := []file{
		{name: "ok", content: "right", sum: sum("right"), want: "0"},
		{name: "differs", content: "wrong", sum: sum("right"), want: "-"},
		{name: "missing", missing: true, sum: sum("x"), want: "!"},
		{name: `back\slash`, content: "b", sum: sum("b"), want: "0"},
		{name: "new\nline", content: "n", sum: sum("n"), want: "0"},
	}
	var in bytes.Buffer
	for _, f := range files {
		tmp := filepath.Join(dir, f.name+".part")
		if !f.missing {
			if err := os.WriteFile(tmp, []byte(f.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		in.WriteString(tmp + "\x00" + filepath.Join(dir, f.name) + "\x00" + f.sum + "\x00")
	}
	// A relative name (never a tar batch's, but never given to openssl either).
	if err := os.WriteFile(filepath.Join(dir, "-rel.part"), []byte("r"), 0o600); err != nil {
		t.Fatal(err)
	}
	in.WriteString("-rel.part\x00-rel\x00" + sum("r") + "\x00")
	cmd := exec.Command("perl", "-e", verifyRenameScript)
	cmd.Dir, cmd.Stdin = dir, &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("perl: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(files)+1 {
		t.Fatalf("%d lines, want %d: %q", len(lines), len(files)+1, out)
	}
	for i, f := range files {
		fields := strings.Fields(lines[i])
		judged := fields[len(fields)-1]
		if fields[0] == "!" {
			judged = "!"
		}
		_, renamedErr := os.Stat(filepath.Join(dir, f.name))
		if judged != f.want {
			t.Errorf("%q: line %q, want %s", f.name, lines[i], f.want)
		}
		if renamed := renamedErr == nil; renamed != (f.want == "0") {
			t.Errorf("%q: renamed %v, want %v", f.name, renamed, f.want == "0")
		}
		if f.want == "-" && !strings.HasPrefix(lines[i], sum(f.content)+" ") {
			t.Errorf("%q: line %q does not give the copy's sum %s", f.name, lines[i], sum(f.content))
		}
	}
	if lines[len(files)] != sum("r")+" 0" {
		t.Errorf("relative name: line %q", lines[len(files)])
	}
}
