package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestListSort: ls sorts on the server by name, size or time in either order, pages by offset
// in that order, and refuses an unknown sort or order, and after= with an order other than name
// ascending, with a 400 naming the parameter.
func TestListSort(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	// Sizes and times deliberately in a different order than names; b and d tie on size.
	files := []struct {
		name string
		size int
		age  time.Duration
	}{{"a", 30, 1 * time.Hour}, {"b", 10, 4 * time.Hour}, {"c", 40, 3 * time.Hour}, {"d", 10, 2 * time.Hour}, {"e", 20, 5 * time.Hour}}
	now := time.Now().Truncate(time.Second)
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, make([]byte, f.size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-f.age), now.Add(-f.age)); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, dir, e.srv.User)
	base := "/v1/systems/hpc/ls/" + remote(dir)
	tests := []struct {
		query  string
		status int
		want   string // names in order, or the field a 400 names
	}{
		{"", 200, "a,b,c,d,e"},
		{"?sort=name&order=desc", 200, "e,d,c,b,a"},
		{"?sort=size", 200, "b,d,e,a,c"},
		{"?sort=size&order=desc", 200, "c,a,e,d,b"},
		{"?sort=time", 200, "e,b,c,d,a"},
		{"?sort=time&order=desc", 200, "a,d,c,b,e"},
		{"?sort=size&limit=2&offset=2", 200, "e,a"},
		{"?sort=time&order=desc&limit=2&offset=4", 200, "e"},
		{"?after=b", 200, "c,d,e"},
		{"?sort=owner", 400, "sort"},
		{"?order=up", 400, "order"},
		{"?sort=size&after=b", 400, "after"},
		{"?order=desc&after=b", 400, "after"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			r := e.do("alice", "GET", base+tc.query, nil)
			if r.status != tc.status {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if tc.status != 200 {
				var p struct {
					Errors []struct{ Field string }
				}
				if err := json.Unmarshal(r.body, &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != tc.want {
					t.Fatalf("problem does not name %s: %s", tc.want, r.body)
				}
				return
			}
			var l struct {
				Entries []struct{ Name string }
				Total   int
			}
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, en := range l.Entries {
				names = append(names, en.Name)
			}
			if got := strings.Join(names, ","); got != tc.want || l.Total != len(files) {
				t.Fatalf("got %s (total %d), want %s", got, l.Total, tc.want)
			}
		})
	}
}
