package api

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShareRootNotRedirected: a share's path usually lies inside another share. bob, who holds a
// write grant on alice's share/, moves alice's own link out of the grant (stage/up, to her files
// above share/, or stage/secret, to secret.txt) onto the path of a share nested in his, or of
// one of its parents: carol's read grant, a read link anyone may hold, a transfer made through
// carol's grant. Each must then be refused, never served what the link points to; before the
// swap each is served.
func TestShareRootNotRedirected(t *testing.T) {
	f := newRaceFixture(t)
	f.e.register("carol", "own")
	carolOwn := f.e.srv.MkTemp(t)
	grant := func(p string) string {
		t.Helper()
		if r := f.e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "user:carol", "path": p, "access": "read"}); r.status != 201 {
			t.Fatalf("grant: %d %s", r.status, r.body)
		}
		return p
	}
	link := func(p string) string {
		t.Helper()
		r := f.e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": p, "access": "read", "expires_in_s": 600})
		if r.status != 201 {
			t.Fatalf("link: %d %s", r.status, r.body)
		}
		u := r.json(t)["url"].(string)
		return u[strings.Index(u, "/v1/links/"):]
	}
	anonymous := func(u string) resp {
		t.Helper()
		res, err := http.Get(f.e.url + u)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return resp{status: res.StatusCode, body: b}
	}
	transferred := 0
	for _, tc := range []struct {
		name string
		// swapAt is the path (in share/) bob puts alice's link stage/<link> at; file makes it a
		// file rather than a directory before the swap, with a file "in" inside a directory.
		swapAt, link string
		file         bool
		// share makes the nested share and returns a handle for use, which uses it and says
		// what must not be in the answer after the swap.
		share func(top string) string
		use   func(t *testing.T, h string) (r resp, mark string)
	}{
		{"grant on the swapped path", "pub", "up", false, grant, func(t *testing.T, h string) (resp, string) {
			return f.e.do("carol", "GET", f.url("content", filepath.Join(h, "secret.txt")), nil), secretMark
		}},
		{"grant below the swapped path", "deep", "up", false, func(top string) string {
			return grant(filepath.Join(top, "victim"))
		}, func(t *testing.T, h string) (resp, string) {
			return f.e.do("carol", "GET", f.url("content", filepath.Join(h, "v00")), nil), victimMark
		}},
		{"listing through the grant", "lpub", "up", false, grant, func(t *testing.T, h string) (resp, string) {
			return f.e.do("carol", "GET", f.url("ls", h), nil), "secret.txt"
		}},
		{"link to a file", "pub.txt", "secret", true, link, func(t *testing.T, h string) (resp, string) {
			return anonymous(h), secretMark
		}},
		{"link to a directory", "lnk", "up", false, link, func(t *testing.T, h string) (resp, string) {
			return anonymous(h + "?archive=tar"), secretMark
		}},
		{"transfer through the grant", "tpub", "up", false, grant, func(t *testing.T, h string) (resp, string) {
			transferred++
			dst := filepath.Join(carolOwn, "copy"+string(rune('0'+transferred)))
			r := f.e.do("carol", "POST", "/v1/transfers", map[string]any{"recursive": true,
				"source": map[string]any{"system": "alice:hpc", "path": h}, "destination": map[string]any{"system": "own", "path": dst}})
			if r.status != 202 {
				return r, secretMark
			}
			m := f.e.waitTransfer("carol", r.json(t)["id"].(string), time.Minute)
			got := resp{status: 200, body: []byte(m["status"].(string))}
			if m["status"] != "succeeded" {
				got.status = 403
			}
			if b, err := os.ReadFile(filepath.Join(dst, "secret.txt")); err == nil {
				got.body = b
			}
			return got, secretMark
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.resetLinks(t)
			f.ownerLink(t, filepath.Join(f.root, "secret.txt"), filepath.Join(f.share, "stage", "secret"))
			top := filepath.Join(f.share, tc.swapAt)
			if tc.file {
				mustWrite(t, top, "public")
			} else {
				mustMkdir(t, filepath.Join(top, "victim"))
				mustWrite(t, filepath.Join(top, "secret.txt"), "public")
				mustWrite(t, filepath.Join(top, "victim", "v00"), "public")
			}
			ownTree(t, f.srv, f.root)
			h := tc.share(top)
			if r, _ := tc.use(t, h); r.status != 200 {
				t.Fatalf("before the swap: %d %s, want 200", r.status, r.body)
			}
			if st := f.swap(top, tc.link); st != [2]int{200, 200} {
				t.Fatalf("bob's moves: %v, want both 200", st)
			}
			r, mark := tc.use(t, h)
			if r.status == 200 || strings.Contains(string(r.body), mark) {
				t.Fatalf("after bob put alice's link %s at %s: %d %.300s, want a refusal and nothing from outside share/", tc.link, top, r.status, r.body)
			}
			t.Logf("after the swap: %d %.200s", r.status, r.body)
			f.intact(t)
		})
	}
}
