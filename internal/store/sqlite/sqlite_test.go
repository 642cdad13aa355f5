package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/sqlite"
	"github.com/sshapi/sshapi/internal/store/storetest"
)

func open(t *testing.T, path string) *sqlite.DB {
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
