package auditspool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/sqlite"
)

func openDB(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, db store.AccessStore, owner string) int {
	t.Helper()
	got, err := db.QueryAudit(context.Background(), &store.AuditQueryParams{Principal: owner, Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	return len(got)
}

// TestSpoolDrainsOnceAcrossReopen: entries appended by concurrent callers are held across a
// reopen (a restart), drained into the database, and a file replayed again (a crash between
// the commit and the file's removal) adds nothing.
func TestSpoolDrainsOnceAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t)
	sp, err := Open(Config{Dir: dir, Max: 1000}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if err := sp.Append(t.Context(), store.AuditEntry{Owner: "alice", Action: "files.upload", RequestID: fmt.Sprint(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if sp.Pending() != 50 {
		t.Fatalf("pending %d, want 50", sp.Pending())
	}
	// A second process cannot take the directory while this one holds it.
	if _, err := Open(Config{Dir: dir, Max: 1000}, db, nil); err == nil {
		t.Fatal("a second Open of a locked spool succeeded")
	}
	// An interrupted write's temporary file is not an entry.
	if err := os.WriteFile(filepath.Join(dir, "tmp-123"), []byte("{\"Owner\":\"x\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	names, _ := filepath.Glob(filepath.Join(dir, "*"+fileSuffix))
	saved := map[string][]byte{}
	for _, n := range names {
		saved[n], _ = os.ReadFile(n)
	}

	sp, err = Open(Config{Dir: dir, Max: 1000}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if sp.Pending() != 50 {
		t.Fatalf("pending after reopen %d, want 50", sp.Pending())
	}
	if n, err := sp.Drain(t.Context()); err != nil || n != 50 {
		t.Fatalf("drain: %d %v", n, err)
	}
	if got := count(t, db, "alice"); got != 50 {
		t.Fatalf("%d entries in the database, want 50", got)
	}
	for n, b := range saved { // replay: the files come back as if their removal never happened
		if err := os.WriteFile(n, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sp.Close()
	sp, err = Open(Config{Dir: dir, Max: 1000}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sp.Drain(t.Context()); err != nil || n != 50 {
		t.Fatalf("replayed drain: %d %v", n, err)
	}
	if got := count(t, db, "alice"); got != 50 {
		t.Fatalf("%d entries in the database after a replay, want 50", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmp-123")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file kept: %v", err)
	}
}

// TestSpoolBound: beyond Max entries Append fails with ErrFull and Full says so; draining makes
// room.
func TestSpoolBound(t *testing.T) {
	db := openDB(t)
	sp, err := Open(Config{Dir: t.TempDir(), Max: 3}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	e := store.AuditEntry{Owner: "bob", Action: "x"}
	if err := sp.Append(t.Context(), e, e); err != nil {
		t.Fatal(err)
	}
	if sp.Full() {
		t.Fatal("full at 2 of 3")
	}
	if err := sp.Append(t.Context(), e, e); !errors.Is(err, ErrFull) {
		t.Fatalf("append beyond the bound: %v", err)
	}
	if err := sp.Append(t.Context(), e); err != nil || !sp.Full() {
		t.Fatalf("third entry: %v, full %v", err, sp.Full())
	}
	if _, err := sp.Drain(t.Context()); err != nil || sp.Full() || sp.Pending() != 0 {
		t.Fatalf("drain: %v, pending %d", err, sp.Pending())
	}
	if got := count(t, db, "bob"); got != 3 {
		t.Fatalf("%d entries, want 3 (each Append gave its entries their own ids)", got)
	}
}
