package files

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// member is one entry of a test archive.
type member struct {
	name, body, link string
	kind             byte // tar.TypeReg, TypeDir, TypeSymlink, TypeLink
}

// writeTar writes members to the local file p.
func writeTar(t testing.TB, p string, members []member) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, m := range members {
		h := &tar.Header{Name: m.name, Typeflag: m.kind, Linkname: m.link, Mode: 0o644, Size: int64(len(m.body))}
		if m.kind == tar.TypeDir {
			h.Mode = 0o755
		}
		if m.kind != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if m.kind == tar.TypeReg {
			if _, err := tw.Write([]byte(m.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := errors.Join(tw.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
}

// TestExtractRefusesHostileArchives: members that would land outside the destination are refused
// before anything is written, inside a root_dir, and a pre-existing symlink in the destination is
// replaced or refused, never followed.
func TestExtractRefusesHostileArchives(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	root := filepath.Join(e.dir, "root")
	out := filepath.Join(e.dir, "outside")
	writeLocal(t, e.dir, map[string]string{"root/dst/keep": "keep", "outside/victim": "original"})
	f := e.fs(Options{RootDir: root})
	reg := func(name string) member { return member{name: name, body: "pwned", kind: tar.TypeReg} }
	sym := func(name, target string) member { return member{name: name, link: target, kind: tar.TypeSymlink} }
	hard := func(name, target string) member { return member{name: name, link: target, kind: tar.TypeLink} }
	hostile := []struct {
		name    string
		members []member
	}{
		{"absolute member", []member{reg("ok"), reg(out + "/abs")}},
		{"dotdot member", []member{reg("ok"), reg("../../outside/up")}},
		{"dotdot inside a name", []member{reg("a/../../x")}},
		{"absolute symlink, then a file through it", []member{sym("l", out), reg("l/through")}},
		{"relative symlink out, then a file through it", []member{sym("l", "../../outside"), reg("l/through")}},
		{"symlink inside, then a file through it", []member{{name: "sub/", kind: tar.TypeDir}, sym("l", "sub"), reg("l/through")}},
		{"symlink through a symlink member", []member{sym("a", "."), sym("b", "a/../../outside")}},
		{"absolute hard link", []member{hard("h", out+"/victim")}},
		{"hard link out", []member{hard("h", "../../outside/victim")}},
		{"hard link to a symlink", []member{{name: "d/", kind: tar.TypeDir}, sym("d/l", "../x"), hard("h", "d/l")}},
		{"named pipe", []member{reg("ok"), {name: "fifo", kind: tar.TypeFifo}}},
		{"character device", []member{reg("ok"), {name: "null", kind: tar.TypeChar}}},
	}
	for i, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			arch := filepath.Join(root, "arch", strings.ReplaceAll(tc.name, " ", "_")+".tar")
			if err := os.MkdirAll(filepath.Dir(arch), 0o755); err != nil {
				t.Fatal(err)
			}
			writeTar(t, arch, tc.members)
			dst := filepath.Join(root, "dst")
			err := f.Extract(ctx, arch, dst)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("case %d: %v, want ErrInvalid", i, err)
			}
			if got := localTree(t, dst); !slices.Equal(got, []string{".", "keep"}) {
				t.Errorf("destination changed: %q", got)
			}
		})
	}
	if got := localTree(t, out); !slices.Equal(got, []string{".", "victim"}) || !localIs(t, filepath.Join(out, "victim"), "original") {
		t.Errorf("outside changed: %q", got)
	}

	// A benign archive with links inside it is extracted and merged into existing content.
	dst := filepath.Join(root, "dst")
	if err := os.Symlink(out, filepath.Join(dst, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(out, "victim"), filepath.Join(dst, "linkfile")); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(root, "good.tar")
	writeTar(t, good, []member{
		{name: "./", kind: tar.TypeDir}, {name: "d/", kind: tar.TypeDir}, reg("d/f"), sym("d/l", "f"), sym("top", "d/f"),
		hard("d/h", "d/f"), reg("linkfile"),
	})
	if err := f.Extract(ctx, good, dst); err != nil {
		t.Fatal(err)
	}
	want := []string{".", "d", "d/f", "d/h", "d/l", "keep", "linkdir", "linkfile", "top"}
	if got := localTree(t, dst); !slices.Equal(got, want) {
		t.Errorf("extracted %q, want %q", got, want)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "linkfile")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the link in the destination was not replaced by the archive's file: %v", err)
	}

	// A directory member where the destination has a symlink to a directory outside: refused,
	// nothing written through the link.
	bad := filepath.Join(root, "bad.tar")
	writeTar(t, bad, []member{{name: "linkdir/", kind: tar.TypeDir}, reg("linkdir/through")})
	if err := f.Extract(ctx, bad, dst); !errors.Is(err, ErrNotDir) {
		t.Errorf("merge into a symlinked directory: %v, want ErrNotDir", err)
	}
	if got := localTree(t, out); !slices.Equal(got, []string{".", "victim"}) || !localIs(t, filepath.Join(out, "victim"), "original") {
		t.Errorf("outside changed: %q", got)
	}
	entries, _ := os.ReadDir(dst)
	for _, en := range entries {
		if IsTempName(en.Name()) {
			t.Errorf("temporary directory %s left behind", en.Name())
		}
	}
}
