package files

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

	if _, _, _, err := f.CreateResumable(ctx, dest, false, false); !isKind(err, fs.ErrNotExist) && !isKind(err, ErrNotDir) {
		t.Fatalf("missing parent: %v", err)
	}
	abs, part, _, err := f.CreateResumable(ctx, dest, false, true)
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
	_, part2, _, err := f.CreateResumable(ctx, dest, false, false)
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
	if _, _, _, err := f.CreateResumable(ctx, dest, false, false); !isKind(err, fs.ErrExist) {
		t.Fatalf("existing: %v", err)
	}
	_, part3, _, err := f.CreateResumable(ctx, dest, true, false)
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

// TestResumableFinish covers the last request of a resumable upload through its open part file
// (OpenResumableToFinish, Finish): the part file is cut at the committed length, gets the
// overwritten file's mode (else DefaultFileMode) and is renamed into place, or, without
// overwrite onto an existing file, removed; its handles are closed by Finish (a Close after
// it does nothing). A symlink in the part file's place is refused with nothing written through
// it, though its lstat and open go out together.
func TestResumableFinish(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	f := e.fs(Options{})
	tests := []struct {
		name      string
		existing  os.FileMode // 0: no file at the destination
		overwrite bool
		wantErr   error
		wantMode  os.FileMode
	}{
		{"new file", 0, false, nil, DefaultFileMode},
		{"overwrite keeps the mode", 0o640, true, nil, 0o640},
		{"existing without overwrite", 0o600, false, fs.ErrExist, 0o600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(e.dir, strings.ReplaceAll(tc.name, " ", "-")+".bin")
			if tc.existing != 0 {
				writeAsUser(t, e, dest, "old", tc.existing)
			}
			_, part, _, err := f.CreateResumable(ctx, dest, true, false)
			if err != nil {
				t.Fatal(err)
			}
			w, err := f.OpenResumableToFinish(ctx, dest, part)
			if err != nil {
				t.Fatal(err)
			}
			// More than is committed, as a failed write leaves it.
			if err := w.WriteAt([]byte("committed+garbage"), 0); err != nil {
				t.Fatal(err)
			}
			err = w.Finish(ctx, int64(len("committed")), tc.overwrite)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Finish: %v, want %v", err, tc.wantErr)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("Close after Finish: %v", err)
			}
			if err := w.WriteAt([]byte("x"), 0); err == nil {
				t.Fatal("a write after Finish succeeded")
			}
			if _, err := os.Lstat(filepath.Join(e.dir, part)); !os.IsNotExist(err) {
				t.Fatalf("the part file is still there: %v", err)
			}
			b, _ := os.ReadFile(dest)
			fi, err := os.Stat(dest)
			if err != nil || fi.Mode().Perm() != tc.wantMode {
				t.Fatalf("destination: %v %v, want mode %v", fi, err, tc.wantMode)
			}
			want := "committed"
			if tc.wantErr != nil {
				want = "old"
			}
			if string(b) != want {
				t.Fatalf("content %q, want %q", b, want)
			}
		})
	}

	// A symlink to a file of the user's in the part file's place: refused, the file untouched.
	dest := filepath.Join(e.dir, "victim-dest.bin")
	_, part, _, err := f.CreateResumable(ctx, dest, false, false)
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(e.dir, "victim.txt")
	writeAsUser(t, e, victim, "precious", 0o644) // the user may write it
	if err := e.sftp.Remove(filepath.Join(e.dir, part)); err != nil {
		t.Fatal(err)
	}
	if err := e.sftp.Symlink(victim, filepath.Join(e.dir, part)); err != nil {
		t.Fatal(err)
	}
	for _, open := range []func(context.Context, string, string) (*ResumableFile, error){f.OpenResumable, f.OpenResumableToFinish} {
		if _, err := open(ctx, dest, part); !isKind(err, fs.ErrNotExist) {
			t.Fatalf("symlinked part file: %v", err)
		}
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Fatalf("the symlink's target: %q %v", b, err)
	}
}

// writeAsUser writes content to p as the remote user, with mode.
func writeAsUser(t *testing.T, e *env, p, content string, mode os.FileMode) {
	t.Helper()
	w, err := e.sftp.Create(p)
	if err == nil {
		_, err = w.Write([]byte(content))
		err = errors.Join(err, w.Chmod(mode), w.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
}
