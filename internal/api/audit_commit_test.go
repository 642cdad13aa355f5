package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/store/sqlite"
)

// TestAuditFailureIsAnswered: when an action's audit entry cannot be committed, the answer is a
// 500 that says the action was carried out and its entry is missing, not the action's success;
// the action itself has happened.
func TestAuditFailureIsAnswered(t *testing.T) {
	var db *sqlite.DB
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) { db = d.Store.(*sqlite.DB) })
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "hpc", "host": e.srv.Host, "port": e.srv.Port, "host_keys": []string{e.srv.AuthorizedHostKey()}}); r.status != 201 {
		t.Fatalf("create system: %d %s", r.status, r.body)
	}
	// The audit table goes away: every entry now fails to commit (a real store error).
	if _, err := db.SQL().ExecContext(t.Context(), "DROP TABLE audit_log"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, method, path string }{
		{"wrapped route", "POST", "/v1/systems/hpc/grants"},
		{"self-audited route", "DELETE", "/v1/systems/hpc"},
	} {
		var body any
		if tc.method == "POST" {
			body = map[string]any{"principal": "user:bob", "path": "/scratch", "access": "read"}
		}
		r := e.do("alice", tc.method, tc.path, body)
		var p Problem
		_ = json.Unmarshal(r.body, &p)
		if r.status != 500 || r.header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(p.Detail, "carried out") || !strings.Contains(p.Detail, "audit entry could not be recorded") {
			t.Fatalf("%s: %d %s %s, want 500 saying the audit entry is missing", tc.name, r.status, r.header.Get("Content-Type"), r.body)
		}
		if tc.method == "POST" {
			if r := e.do("alice", "GET", "/v1/systems/hpc/grants", nil); !strings.Contains(string(r.body), "user:bob") {
				t.Fatalf("the grant was not created: %d %s", r.status, r.body)
			}
		}
	}
	if r := e.do("alice", "GET", "/v1/systems/hpc", nil); r.status != 404 {
		t.Fatalf("the system was not deleted: %d %s", r.status, r.body)
	}
}
