package api

import (
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/store/postgres"
)

// TestDatabaseDownIs503: with the PostgreSQL server stopped, reads and audited writes answer
// 503 with Retry-After naming the database (never 500, never the connection string), the way a
// database restart or failover should look to a client.
func TestDatabaseDownIs503(t *testing.T) {
	c := pgtest.New(t)
	dsn := c.NewDatabase(t)
	db, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) { d.Store = db })
	e.register("alice", "hpc")
	if r := e.do("alice", "GET", "/v1/systems", nil); r.status != 200 {
		t.Fatalf("before: %d %s", r.status, r.body)
	}
	c.Stop()
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/systems", nil},
		{"GET", "/v1/systems/hpc", nil},
		{"POST", "/v1/systems", map[string]any{"id": "other", "host": "127.0.0.1", "trust_on_first_use": true}},
		{"DELETE", "/v1/systems/hpc", nil},
	} {
		r := e.do("alice", tc.method, tc.path, tc.body)
		if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "atabase") {
			t.Errorf("%s %s with the database down: %d (Retry-After %q) %s, want 503 with Retry-After", tc.method, tc.path, r.status, r.header.Get("Retry-After"), r.body)
		}
		if strings.Contains(string(r.body), "postgres://") || strings.Contains(string(r.body), "password") {
			t.Errorf("%s %s: the answer shows connection details: %s", tc.method, tc.path, r.body)
		}
	}
}
