package files

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeLocal creates files below dir directly on this machine (the test sshd is local),
// owned by the test user like everything the remote side creates.
func writeLocal(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	u, err := user.Lookup(testServer.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func names(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

func TestList(t *testing.T) {
	e := newEnv(t)
	f := New(e.sftp, noRunner{t}, Options{})
	ctx := context.Background()
	writeLocal(t, e.dir, map[string]string{
		"b.txt": "bb", "a.txt": "a", "c.log": "ccc", ".hidden": "h", "sub/x.txt": "x", "sub/.h/y.txt": "y",
	})
	if err := os.Symlink("does-not-exist", filepath.Join(e.dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(e.dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(e.dir, "c.log"), os.ModeSetuid|0o751); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		opts ListOptions
		want []string
		next int
	}{
		{"all visible", ListOptions{}, []string{"a.txt", "b.txt", "c.log", "dangling", "linkdir", "sub"}, 0},
		{"hidden", ListOptions{ShowHidden: true}, []string{".hidden", "a.txt", "b.txt", "c.log", "dangling", "linkdir", "sub"}, 0},
		{"pattern", ListOptions{Pattern: "*.txt"}, []string{"a.txt", "b.txt"}, 0},
		{"first page", ListOptions{Limit: 2}, []string{"a.txt", "b.txt"}, 2},
		{"middle page", ListOptions{Limit: 2, Offset: 2}, []string{"c.log", "dangling"}, 4},
		{"last page", ListOptions{Limit: 2, Offset: 4}, []string{"linkdir", "sub"}, 0},
		{"past the end", ListOptions{Offset: 10}, nil, 0},
		{"recursive", ListOptions{Recursive: true}, []string{"a.txt", "b.txt", "c.log", "dangling", "linkdir", "sub", "sub/x.txt"}, 0},
		{"recursive hidden pattern", ListOptions{Recursive: true, ShowHidden: true, Pattern: "?.txt"},
			[]string{"a.txt", "b.txt", "sub/.h/y.txt", "sub/x.txt"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := f.List(ctx, e.dir, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(l.Entries); !slices.Equal(got, tt.want) {
				t.Errorf("names = %q, want %q", got, tt.want)
			}
			if l.NextOffset != tt.next {
				t.Errorf("next offset = %d, want %d", l.NextOffset, tt.next)
			}
		})
	}

	l, err := f.List(ctx, e.dir, ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Entry{}
	for _, en := range l.Entries {
		byName[en.Name] = en
	}
	checks := []struct {
		name, typ, mode, target string
		size                    int64
	}{
		{"dangling", TypeSymlink, "0777", "does-not-exist", int64(len("does-not-exist"))},
		{"linkdir", TypeSymlink, "0777", "sub", 3},
		{"sub", TypeDir, "0755", "", -1},
		{"c.log", TypeFile, "4751", "", 3},
	}
	for _, c := range checks {
		en, ok := byName[c.name]
		if !ok {
			t.Fatalf("%s not listed", c.name)
		}
		if en.Type != c.typ || en.Mode != c.mode || en.LinkTarget != c.target || (c.size >= 0 && en.Size != c.size) {
			t.Errorf("%s = %+v, want type %s mode %s target %q size %d", c.name, en, c.typ, c.mode, c.target, c.size)
		}
		if en.Path != filepath.Join(e.dir, c.name) || en.ModTime.IsZero() {
			t.Errorf("%s path/mtime = %q %v", c.name, en.Path, en.ModTime)
		}
	}

	// Stat follows or not; a dangling link only exists unfollowed.
	if st, err := f.Stat(ctx, filepath.Join(e.dir, "dangling"), false); err != nil || st.LinkTarget != "does-not-exist" {
		t.Errorf("lstat dangling = %+v, %v", st, err)
	}
	if _, err := f.Stat(ctx, filepath.Join(e.dir, "dangling"), true); !isKind(err, os.ErrNotExist) {
		t.Errorf("stat dangling: %v, want not exist", err)
	}
	if st, err := f.Stat(ctx, filepath.Join(e.dir, "linkdir"), true); err != nil || st.Type != TypeDir {
		t.Errorf("stat linkdir = %+v, %v", st, err)
	}
	if _, err := f.List(ctx, e.dir, ListOptions{Pattern: "[", Limit: 1}); !isKind(err, ErrInvalid) {
		t.Errorf("bad pattern: %v, want ErrInvalid", err)
	}
	if _, err := f.List(ctx, filepath.Join(e.dir, "a.txt"), ListOptions{}); !isKind(err, ErrNotDir) {
		t.Errorf("list file: %v, want ErrNotDir", err)
	}
}

func TestListTenThousand(t *testing.T) {
	e := newEnv(t)
	f := New(e.sftp, noRunner{t}, Options{})
	ctx := context.Background()
	const n = 10_000
	want := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("f%05d", (i*7919)%n) // created out of order
		if i%100 == 0 {
			name = "l" + name
			if err := os.Symlink("target-"+name, filepath.Join(e.dir, name)); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(filepath.Join(e.dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	slices.Sort(want)

	start := time.Now()
	l, err := f.List(ctx, e.dir, ListOptions{})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("listed %d entries (%d symlinks) in one page in %v", len(l.Entries), n/100, elapsed)
	if got := names(l.Entries); !slices.Equal(got, want) || l.Total != n || l.NextOffset != 0 {
		t.Fatalf("one page: %d entries, total %d, next %d; sorted=%v", len(got), l.Total, l.NextOffset, slices.Equal(got, want))
	}
	for _, en := range l.Entries {
		if strings.HasPrefix(en.Name, "l") != (en.LinkTarget == "target-"+en.Name) {
			t.Fatalf("entry %+v: link target wrong", en)
		}
	}

	var paged []string
	for off := 0; ; {
		l, err := f.List(ctx, e.dir, ListOptions{Limit: 999, Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, names(l.Entries)...)
		if l.NextOffset == 0 {
			break
		}
		off = l.NextOffset
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("pages joined: %d entries, sorted=%v", len(paged), slices.Equal(paged, want))
	}
}
