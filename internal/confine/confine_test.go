package confine

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestCheck judges paths against a root on a real sshd: lexical escapes, symlinks (existing and
// dangling) leading out, and ".." after a symlink inside a dangling link's target.
func TestCheck(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	c := srv.SFTP(t)

	dir := srv.MkTemp(t)
	root := filepath.Join(dir, "root")
	out := filepath.Join(dir, "outside")
	for _, d := range []string{root + "/sub", out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"esc":     out,                   // existing, absolute, out
		"rel":     "../outside",          // existing, relative, out
		"inner":   "sub",                 // existing, inside
		"dangOut": out + "/new",          // dangling, out
		"dangIn":  "sub/new",             // dangling, inside
		"dotdot":  "esc/../nothing",      // dangling; lexically inside, really out
		"chain":   "dangOut",             // dangling through another dangling link
		"loop":    "loop2",               // a loop
		"loop2":   "loop",                //
		"selfDir": ".",                   // the root itself
		"viaSelf": "selfDir/../escaped",  // dangling; ".." after a link to the root leaves it
		"deep":    "sub/../sub/deep-new", // dangling, inside
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "-R", srv.User+":", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	ctx := context.Background()
	j := func(p string) string { return filepath.Join(root, p) }
	cases := []struct {
		p           string
		followFinal bool
		want        error // nil: inside
	}{
		{j("sub"), true, nil},
		{j("sub/missing/deeper"), true, nil},
		{j("inner/x"), true, nil},
		{j("dangIn"), true, nil},
		{j("deep"), true, nil},
		{j("esc"), false, nil}, // the link itself
		{j("dangOut"), false, nil},
		{root, true, nil},
		{dir, true, ErrOutside},
		{j("../outside"), true, ErrOutside},
		{"/etc/passwd", true, ErrOutside},
		{j("esc"), true, ErrOutside},
		{j("esc/new"), false, ErrOutside},
		{j("rel/x"), true, ErrOutside},
		{j("dangOut"), true, ErrOutside},
		{j("dangOut/x"), false, ErrOutside},
		{j("dotdot"), true, ErrOutside},
		{j("chain"), true, ErrOutside},
		{j("viaSelf"), true, ErrOutside},
		{j("loop"), true, errAny},
	}
	// Each case is judged by a fresh Root (realpath first) and by one that already knows every
	// parent directory (lstat first).
	warm, err := New(ctx, c, srv.Home, root)
	if err != nil {
		t.Fatal(err)
	}
	for pass, name := range []string{"cold", "warm", "warm again"} {
		for _, tc := range cases {
			rt := warm
			if pass == 0 {
				if rt, err = New(ctx, c, srv.Home, root); err != nil {
					t.Fatal(err)
				}
			}
			abs, err := rt.Abs(tc.p)
			if err == nil {
				err = rt.Check(ctx, c, abs, tc.followFinal)
			}
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("%s: %s (follow %v): refused: %v", name, tc.p, tc.followFinal, err)
			case tc.want == errAny && err == nil:
				t.Errorf("%s: %s (follow %v): allowed", name, tc.p, tc.followFinal)
			case tc.want != nil && tc.want != errAny && !errors.Is(err, tc.want):
				t.Errorf("%s: %s (follow %v): %v, want %v", name, tc.p, tc.followFinal, err, tc.want)
			}
		}
	}

	// Unconfined: paths are only made absolute; bad paths are refused.
	u, err := New(ctx, c, srv.Home, "")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := u.Resolve(ctx, c, "a//b/../c", true); err != nil || p != filepath.Join(srv.Home, "a/c") {
		t.Errorf("unconfined resolve: %q %v", p, err)
	}
	for _, bad := range []string{"", "a\x00b"} {
		if _, err := u.Abs(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

// errAny marks a case that must be refused for any reason.
var errAny = errors.New("any error")

// TestNarrow: a further root (a grant's path) must lie inside the root, symlinks followed, and
// a path inside it is judged against it.
func TestNarrow(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	c := srv.SFTP(t)
	dir := srv.MkTemp(t)
	root := filepath.Join(dir, "root")
	for _, d := range []string{root + "/shared", root + "/secret", dir + "/outside"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Symlink(dir+"/outside", root+"/away")          // a link leaving the root
	_ = os.Symlink(root+"/secret", root+"/shared/escape") // inside the root, outside the grant
	_ = os.Symlink("shared", root+"/alias")               // inside the root, to a real share
	_ = os.Symlink(root, dir+"/rootlink")                 // the root as configured through a link
	if out, err := exec.Command("chown", "-R", srv.User+":", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	ctx := context.Background()
	r, err := New(ctx, c, srv.Home, root)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir  string
		want error
	}{
		{root + "/shared", nil},
		{root + "/shared/new-file", nil}, // a link to a file not uploaded yet
		{root + "/away", ErrOutside},     // resolves outside the root
		{dir + "/outside", ErrOutside},   // outside as written
		// Through a link below the root, even one that stays inside: whoever restructures an
		// enclosing share could have put it there (TestShareRootNotRedirected in package api).
		{root + "/alias", ErrLinkedRoot},
		{root + "/alias/sub", ErrLinkedRoot},
		{root + "/shared/escape", ErrLinkedRoot},
	}
	for _, tt := range tests {
		_, err := r.Narrow(ctx, c, tt.dir)
		if !errors.Is(err, tt.want) {
			t.Errorf("Narrow(%s) = %v, want %v", tt.dir, err, tt.want)
		}
	}
	// Links at the base or above it are the owner's: a root configured through a link narrows.
	rl, err := New(ctx, c, srv.Home, dir+"/rootlink")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.Narrow(ctx, c, dir+"/rootlink/shared"); err != nil {
		t.Errorf("a share below a root configured through a link: %v", err)
	}
	// Without a root directory the base is the home directory (the sshd's temporary
	// directories are made in it).
	un, err := New(ctx, c, srv.Home, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := un.Narrow(ctx, c, root+"/shared"); err != nil {
		t.Errorf("a share below the home directory: %v", err)
	}
	if _, err := un.Narrow(ctx, c, dir+"/rootlink/shared"); !errors.Is(err, ErrLinkedRoot) {
		t.Errorf("a share through a link below the home directory: %v, want ErrLinkedRoot", err)
	}
	g, err := r.Narrow(ctx, c, root+"/shared")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, c, root+"/shared/escape/x", true); !errors.Is(err, ErrOutside) {
		t.Errorf("symlink out of the narrowed root: %v", err)
	}
	if _, err := g.Abs(root + "/secret"); !errors.Is(err, ErrOutside) {
		t.Errorf("sibling of the narrowed root: %v", err)
	}
	if err := g.Check(ctx, c, root+"/shared/sub/x", false); err != nil {
		t.Errorf("inside the narrowed root: %v", err)
	}
}

// TestCheckLink judges symlinks about to be made, on a real sshd: the target is resolved from
// the canonical form of the link's directory (a directory reached through a symlink climbs from
// where it really is), a ".." after a name is refused whatever that name is (a symlink to the
// root itself would lead out, which lexical cleaning does not see), and leading ".." and names
// are judged as the server resolves them.
func TestCheckLink(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	c := srv.SFTP(t)
	dir := srv.MkTemp(t)
	root := filepath.Join(dir, "root")
	out := filepath.Join(dir, "outside")
	for _, d := range []string{root + "/sub/deep", root + "/a/b", out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{
		"up":     root,       // the root itself, absolute
		"self":   ".",        // the root itself, relative
		"esc":    out,        // out
		"via":    "sub/deep", // a directory deeper down
		"a/b/ld": root,       // a directory link to the root, two levels down
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("chown", "-R", srv.User+":", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	ctx := context.Background()
	j := func(p string) string { return filepath.Join(root, p) }
	tests := []struct {
		at, target string
		want       error // nil: allowed
	}{
		{j("l"), "sub/x", nil},
		{j("l"), ".", nil},
		{j("sub/l"), "..", nil},
		{j("sub/deep/l"), "../../a/b", nil},
		{j("l"), root + "/sub/x", nil},
		{j("l"), "up/x", nil},                 // through a link to the root: inside
		{j("via/l"), "../../x", nil},          // via is sub/deep: ../.. is the root (lexically: outside)
		{j("l"), "..", ErrOutside},            //
		{j("l"), "../outside/x", ErrOutside},  //
		{j("l"), "esc/x", ErrOutside},         // through a link out
		{j("l"), "/etc/passwd", ErrOutside},   //
		{j("l"), out, ErrOutside},             //
		{j("a/b/ld/l"), "../x", ErrOutside},   // ld is the root: .. is its parent (lexically: a/b/x)
		{j("l"), "up/../outside", ErrOutside}, // lexically root/outside; up is the root: its parent
		{j("l"), "self/../outside", ErrDotDotAfterName},
		{j("l"), "sub/../x", ErrDotDotAfterName}, // harmless now, but sub may become a link
		{j("l"), root + "/up/../x", ErrDotDotAfterName},
		{j("l"), "", ErrInvalid},
	}
	r, err := New(ctx, c, srv.Home, root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		err := r.CheckLink(ctx, c, tt.at, tt.target)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("link %s -> %s: %v, want %v", tt.at, tt.target, err, tt.want)
		}
	}
	un, err := New(ctx, c, srv.Home, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := un.CheckLink(ctx, c, j("l"), "/etc/passwd"); err != nil {
		t.Errorf("unconfined: %v", err)
	}
}
