package transfer

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// setRoot gives owner's system name a root_dir.
func (s *systems) setRoot(owner, name, root string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sys := s.m[owner+"/"+name]
	sys.RootDir = root
	s.m[owner+"/"+name] = sys
}

// ownTree makes everything under dir belong to the sshd user.
func ownTree(t *testing.T, srv *sshtest.Server, dir string) {
	t.Helper()
	var paths []string
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return nil
	})
	owned(t, srv, paths...)
}

// itemsByDst returns the transfer's items keyed by destination path relative to base.
func itemsByDst(t *testing.T, h *harness, id, base string) map[string]Item {
	t.Helper()
	items, err := h.eng.Items(t.Context(), "alice", id, -1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Item{}
	for _, it := range items {
		rel, _ := filepath.Rel(base, it.Destination)
		m[rel] = it
	}
	return m
}

// TestTransferConfinesEveryItem: with root_dir on both systems, every item is judged, not only
// the top path: a symlink in the source tree that points out is not recreated pointing out (its
// target resolved on the destination, where a ".." after a link to the root, or from a directory
// that is a link to the root, leaves it though the cleaned target is inside), and existing
// symlinks at the destination (a directory and a file) that point out of the root are refused
// instead of followed. Nothing outside either root is read into the copy or written.
func TestTransferConfinesEveryItem(t *testing.T) {
	h := newHarness(t, Config{RetryBase: 10 * time.Second, PollInterval: 50 * time.Millisecond})
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	srcRoot, dstRoot := filepath.Join(srcDir, "root"), filepath.Join(dstDir, "root")
	h.sys.setRoot("alice", "a", srcRoot)
	h.sys.setRoot("alice", "b", dstRoot)

	tree := filepath.Join(srcRoot, "tree")
	for p, content := range map[string]string{
		"root/tree/f1": "f1", "root/tree/sub/f2": "f2", "root/tree/ok/f3": "f3", "outside/secret": "secret",
	} {
		mustWrite(t, filepath.Join(srcDir, p), content)
	}
	mustSymlink(t, filepath.Join(srcDir, "outside"), filepath.Join(tree, "esc")) // absolute, out
	mustSymlink(t, "../../../outside/secret", filepath.Join(tree, "rel"))        // relative, out
	mustSymlink(t, "ok/f3", filepath.Join(tree, "inner"))                        // inside
	// Lexically inside at the destination, really out: "up" there is the root itself, so its
	// ".." is the root's parent; and "lnk" there is the root, so lnk/l's ".." is too.
	mustSymlink(t, "../up/../outside/victim", filepath.Join(tree, "climb"))
	if err := os.MkdirAll(filepath.Join(tree, "lnk"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "../outside/victim", filepath.Join(tree, "lnk", "l"))
	ownTree(t, a, srcDir)

	dst := filepath.Join(dstRoot, "copy")
	mustWrite(t, filepath.Join(dstDir, "outside", "victim"), "original")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join(dstDir, "outside"), filepath.Join(dst, "sub"))          // a directory link out
	mustSymlink(t, filepath.Join(dstDir, "outside", "victim"), filepath.Join(dst, "f1")) // a file link out
	mustSymlink(t, dstRoot, filepath.Join(dstRoot, "up"))                                // the root, from inside it
	mustSymlink(t, dstRoot, filepath.Join(dst, "lnk"))                                   // a directory link to the root
	ownTree(t, b, dstDir)

	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: tree}, Destination: Endpoint{System: "b", Path: dst}, Recursive: true})
	tr = h.wait("alice", tr.ID, time.Minute, nil)
	if tr.Status != StatusFailed {
		t.Fatalf("status %s, want failed (some files were refused): %s", tr.Status, tr.Error)
	}
	items := itemsByDst(t, h, tr.ID, dst)
	for rel, want := range map[string]ItemStatus{
		"sub": ItemFailed, "sub/f2": ItemFailed, "f1": ItemFailed, "esc": ItemFailed, "rel": ItemFailed,
		"climb": ItemFailed, "lnk/l": ItemFailed,
		".": ItemDone, "ok": ItemDone, "ok/f3": ItemDone, "inner": ItemDone, "lnk": ItemDone,
	} {
		it, ok := items[rel]
		switch {
		case !ok:
			t.Errorf("no item for %s", rel)
		case it.Status != want:
			t.Errorf("%s: %s (%s), want %s", rel, it.Status, it.Error, want)
		case want == ItemFailed && !strings.Contains(it.Error, "outside the allowed root"):
			t.Errorf("%s failed for another reason: %s", rel, it.Error)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dstDir, "outside", "victim")); err != nil || string(got) != "original" {
		t.Errorf("the file outside the root changed: %q %v", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dstDir, "outside")); len(entries) != 1 {
		t.Errorf("something was written outside the root: %d entries", len(entries))
	}
	if fi, err := os.Lstat(filepath.Join(dst, "f1")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the destination link was replaced or followed: %v", err)
	}
	for _, p := range []string{filepath.Join(dst, "esc"), filepath.Join(dst, "climb"), filepath.Join(dstRoot, "l")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("a link pointing out of the root was created: %s", p)
		}
	}
}

// TestTransferRechecksSourceOnResume: a directory of the source swapped for a symlink out of
// the root while the transfer is interrupted is caught when the transfer resumes; the file
// behind the link is not copied.
func TestTransferRechecksSourceOnResume(t *testing.T) {
	const size, chunk = 8 << 20, 1 << 20
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, slowProxy(t, a, 4<<20))
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	srcRoot := filepath.Join(srcDir, "root")
	h.sys.setRoot("alice", "a", srcRoot)
	tree := filepath.Join(srcRoot, "tree")
	for _, d := range []string{filepath.Join(tree, "sub"), filepath.Join(srcDir, "outside")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	randomFile(t, filepath.Join(tree, "a-first"), size, 1)
	randomFile(t, filepath.Join(tree, "sub", "f"), size, 2)
	secret := randomFile(t, filepath.Join(srcDir, "outside", "f"), size, 3)
	ownTree(t, a, srcDir)

	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: tree}, Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "copy")},
		Recursive: true, Streams: 1, ChunkSize: chunk})
	h.wait("alice", tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone > 0 && tr.BytesDone < size })
	h.stop()
	if err := os.Rename(filepath.Join(tree, "sub"), filepath.Join(srcDir, "moved-away")); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join(srcDir, "outside"), filepath.Join(tree, "sub"))
	owned(t, a, filepath.Join(tree, "sub"))
	h.start()
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	items := itemsByDst(t, h, tr.ID, filepath.Join(dstDir, "copy"))
	if it := items["sub/f"]; it.Status != ItemFailed || !strings.Contains(it.Error, "outside the allowed root") {
		t.Fatalf("sub/f: %s %q, want failed outside the root", it.Status, it.Error)
	}
	if it := items["a-first"]; it.Status != ItemDone {
		t.Errorf("a-first: %s %q", it.Status, it.Error)
	}
	if p := filepath.Join(dstDir, "copy", "sub", "f"); fileExistsT(p) && fileSHA(t, p) == secret {
		t.Fatal("the file behind the swapped-in link was copied")
	}
}

// TestTransferTempNotFollowed: a symlink planted at a transfer's temporary name is removed,
// not followed, and the file created in its place is owner-only.
func TestTransferTempNotFollowed(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	c := srv.SFTP(t)
	dir := srv.MkTemp(t)
	victim := filepath.Join(dir, "victim")
	mustWrite(t, victim, "original")
	tmp := tempName(filepath.Join(dir, "dst"), "id")
	mustSymlink(t, victim, tmp)
	ownTree(t, srv, dir)
	f, err := createTemp(c, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("new data")); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if got, _ := os.ReadFile(victim); string(got) != "original" {
		t.Fatalf("the planted link was followed: victim now %q", got)
	}
	fi, err := os.Lstat(tmp)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != tempMode {
		t.Fatalf("temporary file: %v %v, want a regular file with mode %v", fi, err, tempMode)
	}
	// Resuming never opens a link at the temporary name either.
	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, victim, tmp)
	if f, err := openTemp(c, tmp); err == nil {
		_ = f.Close()
		t.Fatal("openTemp opened a symlink")
	}
}

// TestTransferKeepsModes: files and directories arrive with their source modes, between two
// systems and within one (cp on the server), including a directory its owner cannot write.
func TestTransferKeepsModes(t *testing.T) {
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	tree := filepath.Join(srcDir, "tree")
	modes := map[string]os.FileMode{
		"private": 0o600, "group": 0o640, "exec": 0o755, "d750": 0o750 | fs.ModeDir, "d750/x": 0o604,
		"d700": 0o700 | fs.ModeDir, "d700/big": 0o640, "ro": 0o555 | fs.ModeDir, "ro/f": 0o444,
	}
	for _, rel := range []string{"d750", "d700", "ro"} {
		if err := os.MkdirAll(filepath.Join(tree, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for rel, m := range modes {
		if m.IsDir() {
			continue
		}
		if rel == "d700/big" {
			randomFile(t, filepath.Join(tree, rel), 3<<20, 4) // several ranges
			continue
		}
		mustWrite(t, filepath.Join(tree, rel), rel)
	}
	ownTree(t, a, srcDir)
	for rel, m := range modes { // after writing: the read-only directory last
		if err := os.Chmod(filepath.Join(tree, rel), m.Perm()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(tree, "ro"), 0o755) })

	for _, c := range []struct{ name, dstSys, dst string }{
		{"between systems", "b", filepath.Join(dstDir, "copy")},
		{"same system", "a", filepath.Join(srcDir, "copy")},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: tree}, Destination: Endpoint{System: c.dstSys, Path: c.dst},
				Recursive: true, ChunkSize: 1 << 20})
			tr = h.wait("alice", tr.ID, time.Minute, nil)
			t.Cleanup(func() { _ = os.Chmod(filepath.Join(c.dst, "ro"), 0o755) })
			if tr.Status != StatusSucceeded {
				t.Fatalf("status %s: %s", tr.Status, tr.Error)
			}
			for rel, m := range modes {
				fi, err := os.Lstat(filepath.Join(c.dst, rel))
				if err != nil {
					t.Errorf("%s: %v", rel, err)
					continue
				}
				if fi.Mode().Perm() != m.Perm() {
					t.Errorf("%s: mode %v, want %v", rel, fi.Mode().Perm(), m.Perm())
				}
			}
		})
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func fileExistsT(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
