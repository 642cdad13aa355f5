package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTextEditIfMatch: GET text/ gives the content and a strong ETag; PUT saves with the right
// If-Match, answers 412 (nothing written, the current ETag sent) after the file changed, 428
// without If-Match, and 409 for binary or large files; each problem names its field.
func TestTextEditIfMatch(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write("notes.txt", "v1\n")
	write("bin.dat", "a\x00b")
	write("big.txt", strings.Repeat("x", maxEditBytes+1))
	chownTree(t, dir, e.srv.User)
	u := "/v1/systems/hpc/text/" + remote(dir) + "/notes.txt"

	r := e.do("alice", "GET", u, nil)
	if r.status != 200 || r.json(t)["content"] != "v1\n" || r.header.Get("ETag") == "" {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	v1 := r.header.Get("ETag")
	write("notes.txt", "v2 by someone else\n") // same second, other size: still a new ETag
	chownTree(t, dir, e.srv.User)

	tests := []struct {
		name    string
		method  string
		path    string
		ifMatch string
		body    any
		status  int
		field   string
	}{
		{"stale ETag", "PUT", u, v1, map[string]string{"content": "mine\n"}, 412, "If-Match"},
		{"no If-Match", "PUT", u, "", map[string]string{"content": "mine\n"}, 428, "If-Match"},
		{"weak ETag never matches", "PUT", u, "W/" + v1, map[string]string{"content": "mine\n"}, 412, "If-Match"},
		{"unknown field", "PUT", u, "*", map[string]string{"text": "x"}, 400, ""},
		{"binary", "GET", "/v1/systems/hpc/text/" + remote(dir) + "/bin.dat", "", nil, 409, ""},
		{"too large", "GET", "/v1/systems/hpc/text/" + remote(dir) + "/big.txt", "", nil, 409, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.ifMatch != "" {
				hdr = []string{"If-Match", tc.ifMatch}
			}
			r := e.do("alice", tc.method, tc.path, tc.body, hdr...)
			if r.status != tc.status || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("status %d (%s): %s", r.status, r.header.Get("Content-Type"), r.body)
			}
			if tc.field != "" {
				var p struct{ Errors []struct{ Field string } }
				if err := json.Unmarshal(r.body, &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
					t.Fatalf("problem does not name %s: %s", tc.field, r.body)
				}
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "v2 by someone else\n" {
		t.Fatalf("a refused save wrote: %q", b)
	}

	// With the current ETag the save goes through, keeps the mode, and gives the next ETag.
	cur := e.do("alice", "GET", u, nil).header.Get("ETag")
	r = e.do("alice", "PUT", u, map[string]string{"content": "merged\n"}, "If-Match", cur)
	if r.status != 200 || r.header.Get("ETag") == cur || r.header.Get("ETag") != r.json(t)["etag"] {
		t.Fatalf("save: %d %s", r.status, r.body)
	}
	fi, err := os.Stat(filepath.Join(dir, "notes.txt"))
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "merged\n" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("saved %q mode %v: %v", b, fi.Mode(), err)
	}
}
