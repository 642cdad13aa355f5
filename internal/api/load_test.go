package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/slot"
)

// TestLoadEndToEnd runs POST /sshapi/v2/load against the real test sshd through the pool.
func TestLoadEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")

	r := e.do("alice", "POST", "/sshapi/v2/load", map[string]any{"name": "hpc", "command": "echo hi", "rate": 20, "duration_s": 1})
	if r.status != 200 {
		t.Fatalf("load: %d %s", r.status, r.body)
	}
	var s struct {
		Scenario     string  `json:"scenario"`
		Rate         float64 `json:"offered_rate"`
		Scheduled    int     `json:"scheduled"`
		OK           int     `json:"ok"`
		Failed       int     `json:"failed"`
		AchievedRate float64 `json:"achieved_rate"`
		Latency      struct {
			P50 float64 `json:"p50_ms"`
			P99 float64 `json:"p99_ms"`
			Max float64 `json:"max_ms"`
		} `json:"latency"`
		Errors map[string]int `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatal(err)
	}
	if s.Scenario != "load" || s.Rate != 20 || s.Scheduled != 20 || s.OK != 20 || s.Failed != 0 || len(s.Errors) != 0 {
		t.Fatalf("summary %s", r.body)
	}
	if s.AchievedRate <= 0 || s.Latency.P50 <= 0 || s.Latency.P50 > s.Latency.P99 || s.Latency.P99 > s.Latency.Max {
		t.Fatalf("latency summary inconsistent: %s", r.body)
	}

	// Failures are counted by kind, not hidden.
	r = e.do("alice", "POST", "/sshapi/v2/load", map[string]any{"name": "hpc", "command": "exit 3", "rate": 10, "duration_s": 0.5})
	if r.status != 200 || !strings.Contains(string(r.body), `"exit 3":5`) || !strings.Contains(string(r.body), `"failed":5`) {
		t.Fatalf("failing command: %d %s", r.status, r.body)
	}

	for _, tc := range []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"rate zero", map[string]any{"name": "hpc", "command": "true", "rate": 0, "duration_s": 1}, 400, "rate"},
		{"rate above cap", map[string]any{"name": "hpc", "command": "true", "rate": 1001, "duration_s": 1}, 400, "rate"},
		{"duration above cap", map[string]any{"name": "hpc", "command": "true", "rate": 1, "duration_s": 61}, 400, "duration_s"},
		{"duration missing", map[string]any{"name": "hpc", "command": "true", "rate": 1}, 400, "duration_s"},
		{"nothing scheduled", map[string]any{"name": "hpc", "command": "true", "rate": 0.5, "duration_s": 1}, 400, "rate"},
		{"name missing", map[string]any{"command": "true", "rate": 1, "duration_s": 1}, 400, "name"},
		{"command missing", map[string]any{"name": "hpc", "rate": 1, "duration_s": 1}, 400, "command"},
		{"unknown field", map[string]any{"name": "hpc", "command": "true", "rate": 1, "duration_s": 1, "rps": 3}, 400, "rps"},
		{"rate not a number", map[string]any{"name": "hpc", "command": "true", "rate": "fast", "duration_s": 1}, 400, "rate"},
		{"unknown credential", map[string]any{"name": "nope", "command": "true", "rate": 1, "duration_s": 1}, 404, ""},
	} {
		r := e.do("alice", "POST", "/sshapi/v2/load", tc.body)
		if r.status != tc.status || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want %d problem+json", tc.name, r.status, r.body, tc.status)
			continue
		}
		if tc.field != "" && !strings.Contains(string(r.body), `"field":"`+tc.field+`"`) {
			t.Errorf("%s: problem does not name field %q: %s", tc.name, tc.field, r.body)
		}
	}
	// Another user cannot load alice's credential; no token is 401.
	if r := e.do("bob", "POST", "/sshapi/v2/load", map[string]any{"name": "hpc", "command": "true", "rate": 1, "duration_s": 1}); r.status != 404 {
		t.Errorf("foreign credential: %d %s", r.status, r.body)
	}
	if r := e.do("", "POST", "/sshapi/v2/load", map[string]any{"name": "hpc", "command": "true", "rate": 1, "duration_s": 1}); r.status != 401 {
		t.Errorf("no token: %d", r.status)
	}
}

// TestLoadRunsAreBounded: with every load slot taken, another run is refused with 429 and
// Retry-After instead of piling more commands onto the pool.
func TestLoadRunsAreBounded(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	var held []*slot.Lease
	for i := range e.api.loads.Capacity() { // the runs themselves would take seconds
		l, err := e.api.loads.TryAcquire(fmt.Sprint("user", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	r := e.do("alice", "POST", "/sshapi/v2/load", map[string]any{"name": "hpc", "command": "true", "rate": 10, "duration_s": 1})
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %v %s", r.status, r.header, r.body)
	}
	held[0].Release()
	r = e.do("alice", "POST", "/sshapi/v2/load", map[string]any{"name": "hpc", "command": "true", "rate": 10, "duration_s": 0.5})
	if r.status != 200 {
		t.Fatalf("with a free slot: %d %s", r.status, r.body)
	}
}
