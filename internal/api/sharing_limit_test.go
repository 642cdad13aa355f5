package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/access"
)

// TestSharingLimits: past access.Config's per-system limits a grant or link is a 409
// problem naming the limit, and nothing is stored; another system has its own room.
func TestSharingLimits(t *testing.T) {
	const limit = 2
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) {
		d.Access = access.New(access.Config{MaxGrantsPerSystem: limit, MaxLinksPerSystem: limit},
			access.Deps{Store: d.Store, Keyring: d.Keyring, Network: d.Network, Log: d.Log})
	})
	for _, id := range []string{"hpc", "other"} {
		if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": id, "host": e.srv.Host, "port": e.srv.Port, "trust_on_first_use": true}); r.status != 201 {
			t.Fatalf("create system: %d %s", r.status, r.body)
		}
	}
	tests := []struct {
		kind string
		body func(n int) map[string]any
	}{
		{"grants", func(n int) map[string]any {
			return map[string]any{"principal": fmt.Sprintf("user:u%d", n), "path": "/data", "access": "read"}
		}},
		{"links", func(n int) map[string]any {
			return map[string]any{"path": fmt.Sprintf("/data/f%d", n), "access": "read"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			for n := range limit {
				if r := e.do("alice", "POST", "/v1/systems/hpc/"+tt.kind, tt.body(n)); r.status != 201 {
					t.Fatalf("%s %d: %d %s", tt.kind, n, r.status, r.body)
				}
			}
			r := e.do("alice", "POST", "/v1/systems/hpc/"+tt.kind, tt.body(limit))
			want := fmt.Sprintf(`system \"hpc\" already has %d %s (the limit): delete some first`, limit, tt.kind)
			if r.status != 409 || r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(r.body), want) {
				t.Fatalf("past the limit: %d %q %s; want 409 problem+json saying %s", r.status, r.header.Get("Content-Type"), r.body, want)
			}
			if r := e.do("alice", "GET", "/v1/systems/hpc/"+tt.kind, nil); strings.Count(string(r.body), `"id"`) != limit {
				t.Fatalf("stored after a refusal: %s", r.body)
			}
			if r := e.do("alice", "POST", "/v1/systems/other/"+tt.kind, tt.body(0)); r.status != 201 {
				t.Fatalf("another system: %d %s", r.status, r.body)
			}
		})
	}
}
