package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/auditspool"
	"github.com/sshapi/sshapi/internal/store/sqlite"
)

// TestAuditSpoolTakesWhatTheDatabaseRefuses: with an audit spool in use, an action whose entry
// the database cannot commit is answered with its real status and its entry is in the spool;
// once the spool is full, audited requests are refused with 503 before they run (the file is
// not written), and a drained spool lets them run again.
func TestAuditSpoolTakesWhatTheDatabaseRefuses(t *testing.T) {
	var db *sqlite.DB
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) { db = d.Store.(*sqlite.DB) })
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	sp, err := auditspool.Open(auditspool.Config{Dir: filepath.Join(t.TempDir(), "spool"), Max: 2}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	e.api.UseAuditSpool(sp)

	// The audit table goes away (a real store error): the grant is answered 201, its entry spooled.
	if _, err := db.SQL().ExecContext(t.Context(), "ALTER TABLE audit_log RENAME TO audit_away"); err != nil {
		t.Fatal(err)
	}
	r := e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "user:bob", "path": "/scratch", "access": "read"})
	if r.status != 201 {
		t.Fatalf("grant with the audit table away: %d %s, want 201 (its entry spooled)", r.status, r.body)
	}
	if sp.Pending() != 1 {
		t.Fatalf("spool holds %d entries, want 1", sp.Pending())
	}
	// A second one fills the spool.
	if r := e.raw("alice", "PUT", "/v1/systems/hpc/content"+dir+"/a.txt", strings.NewReader("a"), ""); r.status != 201 {
		t.Fatalf("upload a: %d %s", r.status, r.body)
	}
	if !sp.Full() {
		t.Fatalf("spool not full at %d entries", sp.Pending())
	}
	// Full: the next upload is refused before it runs.
	r = e.raw("alice", "PUT", "/v1/systems/hpc/content"+dir+"/b.txt", strings.NewReader("b"), "")
	var p Problem
	_ = json.Unmarshal(r.body, &p)
	if r.status != 503 || r.header.Get("Retry-After") == "" || p.Title != "Audit spool full" {
		t.Fatalf("upload with the spool full: %d %s, want 503 Audit spool full with Retry-After", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("the refused upload ran: %v", err)
	}

	// The database is back: the spool drains, each entry once, and requests run again.
	if _, err := db.SQL().ExecContext(t.Context(), "ALTER TABLE audit_away RENAME TO audit_log"); err != nil {
		t.Fatal(err)
	}
	if n, err := sp.Drain(t.Context()); err != nil || n != 2 {
		t.Fatalf("drain: %d %v", n, err)
	}
	if r := e.raw("alice", "PUT", "/v1/systems/hpc/content"+dir+"/b.txt", strings.NewReader("b"), ""); r.status != 201 {
		t.Fatalf("upload b after the drain: %d %s", r.status, r.body)
	}
	got, err := db.QueryAudit(t.Context(), &store.AuditQueryParams{Visible: "alice", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, en := range got {
		seen[en.Action]++
	}
	if seen["POST /v1/systems/{id}/grants"] != 1 || seen["files.upload"] != 2 {
		t.Fatalf("audit after the drain: %v; want 1 grant and 2 uploads (a, b), the refused one not recorded", seen)
	}
}
