package api

import (
	"fmt"
	"strings"
	"testing"
)

// TestSystemsPerOwnerLimit: past http.max_systems_per_owner a user's next system, made by
// POST /v1/systems or POST /sshapi/v2, is a 409 problem naming the limit and nothing is stored;
// another user has a share of their own; a deleted system makes room.
func TestSystemsPerOwnerLimit(t *testing.T) {
	const limit = 3
	e := newEnvConfig(t, Config{OwnerLimits: OwnerLimits{MaxSystemsPerOwner: limit}}, nil)
	create := func(user, id string) resp {
		return e.do(user, "POST", "/v1/systems", map[string]any{"id": id, "host": e.srv.Host, "port": e.srv.Port, "trust_on_first_use": true})
	}
	for n := range limit {
		if r := create("alice", fmt.Sprint("hpc", n)); r.status != 201 {
			t.Fatalf("system %d: %d %s", n, r.status, r.body)
		}
	}
	want := fmt.Sprintf(`user \"alice\" already has %d systems (the limit): delete some first`, limit)
	refused := func(what string, r resp) {
		t.Helper()
		if r.status != 409 || r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(r.body), want) {
			t.Fatalf("%s past the limit: %d %q %s; want 409 problem+json saying %s", what, r.status, r.header.Get("Content-Type"), r.body, want)
		}
	}
	refused("POST /v1/systems", create("alice", "one-too-many"))
	refused("POST /sshapi/v2", e.do("alice", "POST", "/sshapi/v2", map[string]any{"name": "paper", "hostname": e.srv.Host, "port": e.srv.Port,
		"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM), "host_key": e.srv.AuthorizedHostKey()}))
	r := e.do("alice", "GET", "/v1/systems", nil)
	if got := strings.Count(string(r.body), `"host":`); r.status != 200 || got != limit {
		t.Fatalf("alice's systems after the refusals: %d, %d systems: %s; want %d", r.status, got, r.body, limit)
	}
	if r := create("bob", "hpc0"); r.status != 201 {
		t.Fatalf("bob's first system while alice is full: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "DELETE", "/v1/systems/hpc0", nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := create("alice", "after-delete"); r.status != 201 {
		t.Fatalf("a system after a delete made room: %d %s", r.status, r.body)
	}
}

// TestSystemsPerOwnerDefault: without configuration a user may have 1000 systems.
func TestSystemsPerOwnerDefault(t *testing.T) {
	l := OwnerLimits{}
	l.setDefaults()
	if l.MaxSystemsPerOwner != 1000 {
		t.Fatalf("default max_systems_per_owner = %d, want 1000", l.MaxSystemsPerOwner)
	}
}
