package files

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestResumable covers the part-file API of resumable uploads: writes at offsets on separate
// opens, a part file longer than what was committed cut at Finish, the part name confined to
// the destination's directory, a symlink in the part file's place refused, and Finish
// respecting overwrite.
func TestResumable(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	root := filepath.Join(e.dir, "root")
	if err := e.sftp.Mkdir(root); err != nil {
		t.Fatal(err)
	}
	f := e.fs(Options{RootDir: root})
	dest := filepath.Join(root, "sub", "x.bin")

	if _, _, err := f.CreateResumable(ctx, dest, false, false); !isKind(err, fs.ErrNotExist) && !isKind(err, ErrNotDir) {
		t.Fatalf("missing parent: %v", err)
	}
	abs, part, err := f.CreateResumable(ctx, dest, false, true)
	if err != nil {
		t.Fatal(err)
	}
	if abs != dest || !IsTempName(part) {
		t.Fatalf("abs %q part %q", abs, part)
	}
	fi, err := os.Stat(filepath.Join(root, "sub", part))
	if err != nil || fi.Mode().Perm() != tempMode || fi.Size() != 0 {
		t.Fatalf("part file: %v %v", fi, err)
	}
	for i, chunk := range []string{"hello ", "world", "GARBAGE-AFTER-A-FAILED-WRITE"} {
		w, err := f.OpenResumable(ctx, dest, part)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteAt([]byte(chunk), int64([]int{0, 6, 11}[i])); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Confinement: the part name is a temporary name in the destination's directory, and the
	// destination stays inside the root.
	for _, bad := range []string{"../x", "x.part", "sub/" + part, "../" + part} {
		if _, err := f.OpenResumable(ctx, dest, bad); !isKind(err, ErrInvalid) {
			t.Errorf("part %q: %v", bad, err)
		}
	}
	if _, err := f.OpenResumable(ctx, filepath.Join(e.dir, "x.bin"), part); !isKind(err, ErrOutsideRoot) {
		t.Errorf("outside the root: %v", err)
	}
	// A symlink put in a part file's place is not followed.
	_, part2, err := f.CreateResumable(ctx, dest, false, false)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(root, "sub", part2))
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "sub", part2)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.OpenResumable(ctx, dest, part2); !isKind(err, fs.ErrNotExist) {
		t.Fatalf("symlinked part file: %v", err)
	}
	if err := f.RemoveResumable(ctx, dest, part2); err != nil {
		t.Fatal(err)
	}
	// Finish cuts at the committed length and renames into place.
	if _, err := f.FinishResumable(ctx, dest, part, 11, false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dest); err != nil || string(b) != "hello world" {
		t.Fatalf("content %q %v", b, err)
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != DefaultFileMode {
		t.Fatalf("mode %v", fi.Mode())
	}
	// Without overwrite an existing destination is refused (at creation and at the rename).
	if _, _, err := f.CreateResumable(ctx, dest, false, false); !isKind(err, fs.ErrExist) {
		t.Fatalf("existing: %v", err)
	}
	_, part3, err := f.CreateResumable(ctx, dest, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.FinishResumable(ctx, dest, part3, 0, false); !isKind(err, fs.ErrExist) {
		t.Fatalf("rename without overwrite: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "sub", part3)); !os.IsNotExist(err) {
		t.Fatalf("a refused finish left its part file: %v", err)
	}
	if err := f.RemoveResumable(ctx, dest, part3); err != nil {
		t.Fatalf("removing a gone part file: %v", err)
	}
	if names, _ := os.ReadDir(filepath.Join(root, "sub")); len(names) != 1 {
		t.Fatalf("left behind: %v", names)
	}
}
