package study

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// fakeLab is a lab whose remote home is a scratch directory and whose remote user is the
// current one, for the userDir and cleanup logic without an sshd.
func fakeLab(t *testing.T, home string) *lab {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return &lab{srv: &sshtest.Server{Home: home, User: u.Username}}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestUserDirPerRun makes the same bench directory for two labs sharing one remote home (two
// concurrent runs against the same account) and checks that each gets its own directory, that
// making the second leaves the first's files alone, and that cleaning one up removes that run's
// directory and nothing else.
func TestUserDirPerRun(t *testing.T) {
	for _, name := range []string{"bench-transfer", "bench-listing-30", "bench-ls-50"} {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			other := filepath.Join(home, "keep")
			if err := os.Mkdir(other, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(other, "f"))
			writeFile(t, filepath.Join(home, name+".bin")) // a file beside, with the name as prefix

			a, b := fakeLab(t, home), fakeLab(t, home)
			da, err := a.userDir(name)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(da, "bench-src.bin"))
			db, err := b.userDir(name)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(db, "bench-src.bin"))
			if da == db {
				t.Fatalf("both runs got %s", da)
			}
			for _, d := range []string{da, db} {
				if filepath.Dir(d) != home || !strings.HasPrefix(filepath.Base(d), name+"-") {
					t.Errorf("run dir %s: want %s/%s-<unique>", d, home, name)
				}
				if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 {
					t.Errorf("run dir %s: %v %v, want a 0755 directory", d, fi, err)
				}
			}
			if !exists(filepath.Join(da, "bench-src.bin")) {
				t.Fatal("the second run's userDir deleted the first run's files")
			}

			a.removeDirs()
			for path, want := range map[string]bool{da: false, db: true, filepath.Join(db, "bench-src.bin"): true,
				filepath.Join(other, "f"): true, filepath.Join(home, name+".bin"): true, home: true} {
				if got := exists(path); got != want {
					t.Errorf("after the first run's cleanup: %s exists %v, want %v", path, got, want)
				}
			}
			b.removeDirs()
			if exists(db) || !exists(filepath.Join(other, "f")) {
				t.Errorf("after the second run's cleanup: %s exists %v, keep/f exists %v", db, exists(db), exists(filepath.Join(other, "f")))
			}
		})
	}
}

// TestUserDirRejects checks that userDir makes nothing for a name that is not one path element,
// and that cleanup refuses anything that is not a directory directly under the remote home.
func TestUserDirRejects(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../x", "/abs"} {
		home := t.TempDir()
		l := fakeLab(t, home)
		if d, err := l.userDir(name); err == nil {
			t.Errorf("userDir(%q) = %s, want an error", name, d)
		}
		if ents, _ := os.ReadDir(home); len(ents) != 0 || len(l.dirs) != 0 {
			t.Errorf("userDir(%q) left %v, dirs %v", name, ents, l.dirs)
		}
	}
	home := t.TempDir()
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "f"))
	writeFile(t, filepath.Join(home, "f"))
	for _, dir := range []string{home, home + "/", filepath.Dir(home), "/", "", home + "/..", home + "/x/../..", outside, home + "/x/y"} {
		l := fakeLab(t, home)
		l.dirs = []string{dir}
		if err := l.removeDirs(); err == nil {
			t.Errorf("removeDirs accepted %q", dir)
		}
		if !exists(filepath.Join(home, "f")) || !exists(filepath.Join(outside, "f")) {
			t.Fatalf("removeDirs of %q removed files outside a run directory", dir)
		}
	}
}
