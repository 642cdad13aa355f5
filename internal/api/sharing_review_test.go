package api

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkURLUsesConfiguredBase: a link's URL starts with http.public_url, or without it with
// the listen address, and never with the request's Host header.
func TestLinkURLUsesConfiguredBase(t *testing.T) {
	for _, tc := range []struct {
		name, public, want string
	}{
		{"public_url", "https://files.example/sshapi/", "https://files.example/sshapi/v1/links/"},
		{"listen address", "", ""}, // filled with the env's URL below
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvConfig(t, Config{PublicURL: tc.public}, nil)
			e.register("alice", "hpc")
			want := tc.want
			if want == "" {
				want = e.url + "/v1/links/"
			}
			dir := e.srv.MkTemp(t)
			r := e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": dir, "access": "read"},
				"Host", "evil.example", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "http")
			if r.status != 201 {
				t.Fatalf("link: %d %s", r.status, r.body)
			}
			u, _ := r.json(t)["url"].(string)
			if !strings.HasPrefix(u, want) || strings.Contains(u, "evil") {
				t.Fatalf("link url %q, want it under %q whatever the Host header says", u, want)
			}
		})
	}
	if err := (Config{PublicURL: "files.example/x"}).Validate(); err == nil {
		t.Fatal("a public_url without a scheme was accepted")
	}
}

// TestOutsideGrantDetail: a grantee refused for a path that leads out of what is
// shared (a symlink inside the grant pointing elsewhere) is told only that; the owner, on their
// own system with a root_dir, still sees where the path led.
func TestOutsideGrantDetail(t *testing.T) {
	f := newSharingFixture(t)
	e := f.e
	esc := filepath.Join(f.shared, "escape", "data.txt") // the symlink leads to f.sec
	for _, c := range []struct{ who, path string }{
		{"bob", "/v1/systems/alice:hpc/stat" + esc},
		{"bob", "/v1/systems/alice:hpc/content" + esc},
		{"bob", "/v1/systems/alice:hpc/ls" + filepath.Join(f.shared, "escape")},
	} {
		r := e.do(c.who, "GET", c.path, nil)
		if r.status != 403 {
			t.Fatalf("%s %s: %d %s, want 403", c.who, c.path, r.status, r.body)
		}
		if d, _ := r.json(t)["detail"].(string); strings.Contains(d, f.sec) || strings.Contains(d, f.proj) || !strings.Contains(d, "outside") {
			t.Fatalf("%s %s: detail %q names a path outside the grant", c.who, c.path, d)
		}
	}
	// The owner confined by root_dir still sees the canonical path.
	if r := e.do("alice", "PATCH", "/v1/systems/hpc", map[string]any{"root_dir": f.shared}); r.status != 200 {
		t.Fatalf("root_dir: %d %s", r.status, r.body)
	}
	r := e.do("alice", "GET", "/v1/systems/hpc/stat"+esc, nil)
	if d, _ := r.json(t)["detail"].(string); r.status != 403 || !strings.Contains(d, f.sec) {
		t.Fatalf("owner: %d %s, want 403 naming %s", r.status, r.body, f.sec)
	}
}
