package files

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRootDirConfinement(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	root := filepath.Join(e.dir, "root")
	writeLocal(t, e.dir, map[string]string{"root/in.txt": "in", "root/sub/deep.txt": "deep", "outside/secret.txt": "secret"})
	for link, target := range map[string]string{
		"root/escape":     "../outside",                    // relative symlink out
		"root/abs":        filepath.Join(e.dir, "outside"), // absolute symlink out
		"root/inner":      "sub",                           // stays inside
		"root/secretlink": "../outside/secret.txt",
	} {
		if err := os.Symlink(target, filepath.Join(e.dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// RootDir given through a symlink: the canonical root is what paths are compared with.
	if err := os.Symlink("root", filepath.Join(e.dir, "rootlink")); err != nil {
		t.Fatal(err)
	}

	for _, rootOpt := range []string{root, filepath.Join(e.dir, "rootlink")} {
		f := e.fs(Options{RootDir: rootOpt, Home: rootOpt})
		r := func(p string) string { return filepath.Join(rootOpt, p) }
		tests := []struct {
			name string
			do   func() error
			want error // nil: allowed
		}{
			{"inside", func() error { _, err := f.Stat(ctx, r("in.txt"), true); return err }, nil},
			{"relative to home", func() error { _, err := f.Stat(ctx, "sub//deep.txt", true); return err }, nil},
			{"dotdot inside", func() error { _, err := f.Stat(ctx, r("sub/../in.txt"), true); return err }, nil},
			{"symlink inside", func() error { _, err := f.List(ctx, r("inner"), ListOptions{}); return err }, nil},
			{"the link itself", func() error { _, err := f.Stat(ctx, r("escape"), false); return err }, nil},
			{"list root", func() error { _, err := f.List(ctx, rootOpt, ListOptions{}); return err }, nil},
			{"remove a link out", func() error { return f.Remove(ctx, r("secretlink"), false) }, nil},
			{"dotdot out", func() error { _, err := f.Stat(ctx, r("../outside/secret.txt"), true); return err }, ErrOutsideRoot},
			{"relative dotdot out", func() error { _, err := f.Stat(ctx, "../outside", true); return err }, ErrOutsideRoot},
			{"absolute out", func() error { _, err := f.Stat(ctx, "/etc/passwd", true); return err }, ErrOutsideRoot},
			{"symlink out", func() error { _, err := f.Stat(ctx, r("escape/secret.txt"), true); return err }, ErrOutsideRoot},
			{"follow link out", func() error { _, err := f.Stat(ctx, r("escape"), true); return err }, ErrOutsideRoot},
			{"list through link", func() error { _, err := f.List(ctx, r("abs"), ListOptions{}); return err }, ErrOutsideRoot},
			{"read through link", func() error { _, err := f.Head(ctx, r("escape/secret.txt"), 0, 0); return err }, ErrOutsideRoot},
			{"upload through link", func() error {
				_, err := f.Upload(ctx, r("escape/new.txt"), strings.NewReader("x"), UploadOptions{})
				return err
			}, ErrOutsideRoot},
			{"mkdir through link", func() error { return f.Mkdir(ctx, r("abs/newdir/x"), true) }, ErrOutsideRoot},
			{"move out", func() error { return f.Move(ctx, r("in.txt"), r("escape/in.txt"), false) }, ErrOutsideRoot},
			{"copy out", func() error { return f.Copy(ctx, r("escape/secret.txt"), r("stolen"), CopyOptions{}) }, ErrOutsideRoot},
			{"checksum out", func() error { _, err := f.Checksum(ctx, r("escape/secret.txt"), "md5"); return err }, ErrOutsideRoot},
			{"symlink target out", func() error { return f.Symlink(ctx, "../outside", r("newlink")) }, ErrOutsideRoot},
			{"remove root", func() error { return f.Remove(ctx, rootOpt, true) }, ErrInvalid},
		}
		for _, tt := range tests {
			t.Run(filepath.Base(rootOpt)+"/"+tt.name, func(t *testing.T) {
				err := tt.do()
				if tt.want == nil && err != nil {
					t.Fatalf("refused: %v", err)
				}
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Fatalf("error %v, want %v", err, tt.want)
				}
			})
		}
		writeLocal(t, e.dir, map[string]string{}) // re-own anything created
		if err := os.Symlink("../outside/secret.txt", filepath.Join(e.dir, "root/secretlink")); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "outside", "new.txt")); err == nil {
		t.Error("upload escaped the root")
	}
	if _, err := os.Stat(filepath.Join(e.dir, "outside", "in.txt")); err == nil {
		t.Error("move escaped the root")
	}
}
