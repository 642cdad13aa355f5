package files

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTempCreatedExclusively: a name already taken where the temporary file goes (a symlink
// planted to catch the data, or a file) is neither followed nor overwritten.
func TestTempCreatedExclusively(t *testing.T) {
	e := newEnv(t)
	f := e.fs(Options{})
	writeLocal(t, e.dir, map[string]string{"outside/target": "original", "dir/plain.part": "mine"})
	tmpLink := filepath.Join(e.dir, "dir", ".f.sshapi-0123456789abcdef.part")
	if err := os.Symlink(filepath.Join(e.dir, "outside", "target"), tmpLink); err != nil {
		t.Fatal(err)
	}
	for _, tmp := range []string{tmpLink, filepath.Join(e.dir, "dir", "plain.part")} {
		file, err := f.createTemp("upload", filepath.Join(e.dir, "dir", "f"), tmp)
		if err == nil {
			_ = file.Close()
			t.Errorf("%s: created over an existing name", tmp)
		} else if !isKind(err, fs.ErrExist) {
			t.Errorf("%s: %v, want fs.ErrExist", tmp, err)
		}
	}
	if !localIs(t, filepath.Join(e.dir, "outside", "target"), "original") || !localIs(t, filepath.Join(e.dir, "dir", "plain.part"), "mine") {
		t.Error("an existing name was written to")
	}
	if fi, err := os.Lstat(tmpLink); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the planted link was replaced: %v", err)
	}
}

// TestUploadModes: the temporary file is owner-only while data flows; a new file gets the
// default mode or the one asked for; an overwrite keeps the file's mode unless one is given.
func TestUploadModes(t *testing.T) {
	e := newEnv(t)
	f := e.fs(Options{})
	ctx := context.Background()
	dir := filepath.Join(e.dir, "up")
	writeLocal(t, e.dir, map[string]string{"up/kept": "old", "up/changed": "old"})
	for _, n := range []string{"kept", "changed"} {
		if err := os.Chmod(filepath.Join(dir, n), 0o640); err != nil {
			t.Fatal(err)
		}
	}

	// While the body is still arriving, the temporary file exists with mode 0600.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := f.Upload(ctx, filepath.Join(dir, "new"), pr, UploadOptions{Mode: 0o755})
		done <- err
	}()
	if _, err := pw.Write([]byte("first part")); err != nil { // returns once Upload reads it
		t.Fatal(err)
	}
	var tmpMode os.FileMode
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if IsTempName(en.Name()) {
			fi, err := en.Info()
			if err == nil {
				tmpMode = fi.Mode().Perm()
			}
		}
	}
	_, _ = pw.Write([]byte(", second part"))
	_ = pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tmpMode != 0o600 {
		t.Errorf("temporary file mode %v during the upload, want 0600", tmpMode)
	}

	cases := []struct {
		name string
		opts UploadOptions
		want os.FileMode
	}{
		{"new", UploadOptions{Mode: 0o755}, 0o755}, // written above
		{"fresh", UploadOptions{}, DefaultFileMode},
		{"kept", UploadOptions{Overwrite: true}, 0o640},
		{"changed", UploadOptions{Overwrite: true, Mode: 0o600}, 0o600},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name)
		if c.name != "new" {
			if _, err := f.Upload(ctx, p, strings.NewReader("new data"), c.opts); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != c.want {
			t.Errorf("%s: mode %v, want %v", c.name, fi.Mode().Perm(), c.want)
		}
	}
}

// localIs reports whether the local file p holds content.
func localIs(t testing.TB, p, content string) bool {
	t.Helper()
	b, err := os.ReadFile(p)
	return err == nil && string(b) == content
}

// TestCopyOverwriteDoesNotFollowLink: copying over a symlink that points out of the root replaces
// the link; the file it pointed to is untouched.
func TestCopyOverwriteDoesNotFollowLink(t *testing.T) {
	e := newEnv(t)
	root := filepath.Join(e.dir, "root")
	writeLocal(t, e.dir, map[string]string{"root/src/g": "new", "outside/g": "original"})
	if err := os.Symlink(filepath.Join(e.dir, "outside"), filepath.Join(root, "dst")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "dst2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.dir, "outside", "g"), filepath.Join(root, "dst2", "g")); err != nil {
		t.Fatal(err)
	}
	writeLocal(t, e.dir, map[string]string{})
	f := e.fs(Options{RootDir: root})
	ctx := context.Background()
	if err := f.Copy(ctx, filepath.Join(root, "src/g"), filepath.Join(root, "dst2/g"), CopyOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	_ = f.Copy(ctx, filepath.Join(root, "src"), filepath.Join(root, "dst"), CopyOptions{Recursive: true, Overwrite: true})
	if !localIs(t, filepath.Join(e.dir, "outside", "g"), "original") {
		t.Error("the copy wrote through a symlink out of the root")
	}
	if !localIs(t, filepath.Join(root, "dst2", "g"), "new") {
		t.Error("the link was not replaced by the copy")
	}
}
