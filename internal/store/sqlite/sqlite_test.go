package sqlite_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/sqlite"
	"github.com/sshapi/sshapi/internal/store/storetest"
)

func open(t testing.TB, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "sshapi.db"))
	})
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sshapi.db")
	db, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreateSystem(t.Context(), &store.System{Owner: "alice", ID: "c", Host: "h", Port: 22}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Opening again must not re-run migrations or lose data.
	db = open(t, path)
	if _, err := db.GetSystem(t.Context(), "alice", "c"); err != nil {
		t.Fatalf("system lost after reopen: %v", err)
	}
	var mode string
	if err := db.SQL().QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	var fk int
	if err := db.SQL().QueryRowContext(t.Context(), "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
		t.Fatalf("foreign_keys = %d, %v; want 1", fk, err)
	}
}

func TestOpenRejectsURIPaths(t *testing.T) {
	tests := []string{"", ":memory:", "file:x.db", "x.db?mode=ro"}
	for _, path := range tests {
		t.Run(path, func(t *testing.T) {
			if db, err := sqlite.Open(t.Context(), path); err == nil {
				db.Close()
				t.Fatalf("Open(%q) succeeded, want an error", path)
			}
		})
	}
}

// withUmask runs the rest of the test under umask mask, the process-wide file creation mask
// (so the test must not run in parallel with others that create files).
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// assertModes fails the test for each of path, path-wal and path-shm that is missing or whose
// permission bits are not want. The -wal and -shm files exist while a connection is open after
// a write.
func assertModes(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(p), err)
			continue
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", filepath.Base(p), got, want)
		}
	}
}

// TestNewFilesArePrivate opens a new database under the common umask 022, which leaves
// SQLite's own default (0644) readable by every local user: the database and the -wal and
// -shm files SQLite makes beside it are 0600 all the same.
func TestNewFilesArePrivate(t *testing.T) {
	withUmask(t, 0o022)
	path := filepath.Join(t.TempDir(), "sshapi.db")
	db := open(t, path) // migrations write, so the -wal and -shm files exist now
	if err := db.CreateSystem(t.Context(), &store.System{Owner: "alice", ID: "c", Host: "h", Port: 22}); err != nil {
		t.Fatal(err)
	}
	assertModes(t, path, 0o600)
}

// TestJournalFilesTakeTheDatabaseMode checks what TestNewFilesArePrivate relies on: SQLite
// creates -wal and -shm with the mode of the database file (here an existing 0640 one, which
// OpenFile leaves as it is), not with its 0644 default.
func TestJournalFilesTakeTheDatabaseMode(t *testing.T) {
	withUmask(t, 0o022)
	path := filepath.Join(t.TempDir(), "sshapi.db")
	if err := os.WriteFile(path, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	open(t, path)
	assertModes(t, path, 0o640)
}
