package api

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// raw sends a request exactly as written (path not cleaned, redirects not followed).
func (e *env) raw(user, method, path string, body io.Reader, contentType string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+e.token(user))
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// TestRoutesStayPut sends hostile spellings of a file path to every route with a {path...}
// wildcard and checks that each is judged as a path inside that route: no other system is
// touched, nothing outside the system's root_dir changes, and a NUL byte is a 400 naming path.
func TestRoutesStayPut(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "local")
	e.register("alice", "victim")
	dir := e.srv.MkTemp(t)
	jail := filepath.Join(dir, "jail")
	if err := os.Mkdir(jail, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(dir, "victim"), filepath.Join(jail, "keep")} {
		if err := os.WriteFile(f, []byte("unchanged"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, dir, e.srv.User)
	if r := e.do("alice", "PATCH", "/v1/systems/local", map[string]any{"root_dir": jail}); r.status != 200 {
		t.Fatalf("set root_dir: %d %s", r.status, r.body)
	}
	J := remote(jail) + "/"

	const (
		outside = iota // resolves outside root_dir: 403
		inside         // a literal name inside the jail
		nul            // 400 naming path
	)
	spellings := []struct {
		name, path string
		class      int
		literal    string // for inside: the file name the path must mean
	}{
		{"issue", J + "x%2F..%2F..%2Fvictim", outside, ""},
		{"lower-case escape", J + "..%2fvictim", outside, ""},
		{"encoded dots", J + "%2e%2e/victim", outside, ""},
		{"half-encoded dots", J + ".%2e/victim", outside, ""},
		{"literal dots", J + "../victim", outside, ""},
		{"literal dots to the API", "../../../v1/systems/victim", outside, ""},
		{"encoded dots to the API", "..%2F..%2F..%2Fv1%2Fsystems%2Fvictim", outside, ""},
		{"double slashes", J + "..//..//victim", outside, ""},
		{"double encoding", J + "x%252F..%252F..%252Fvictim", inside, "x%2F..%2F..%2Fvictim"},
		{"backslashes", J + "..%5C..%5Cvictim", inside, `..\..\victim`},
		{"NUL", J + "victim%00", nul, ""},
	}

	var wild []route
	for _, rt := range e.api.routes() {
		if strings.HasSuffix(rt.pattern, "/{path...}") {
			wild = append(wild, rt)
		}
	}
	if len(wild) < 10 {
		t.Fatalf("found %d wildcard routes", len(wild))
	}
	for _, rt := range wild {
		prefix := strings.TrimSuffix(strings.Replace(rt.pattern, "{id}", "local", 1), "{path...}")
		for _, sp := range spellings {
			t.Run(rt.method+" "+rt.pattern+"/"+sp.name, func(t *testing.T) {
				var body io.Reader = strings.NewReader("new content")
				ctype := "application/octet-stream"
				if rt.method == "POST" {
					var b bytes.Buffer
					mw := multipart.NewWriter(&b)
					fw, _ := mw.CreateFormFile("file", "posted")
					_, _ = fw.Write([]byte("new content"))
					_ = mw.Close()
					body, ctype = &b, mw.FormDataContentType()
				}
				r := e.raw("alice", rt.method, prefix+sp.path, body, ctype)
				switch sp.class {
				case outside:
					if r.status != http.StatusForbidden {
						t.Errorf("status %d, want 403: %s", r.status, r.body)
					}
				case nul:
					if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"field":"path"`) {
						t.Errorf("status %d, want 400 naming path: %s", r.status, r.body)
					}
				case inside:
					if r.status == http.StatusForbidden || r.status >= 500 || (r.status >= 300 && r.status < 400) {
						t.Errorf("status %d: %s", r.status, r.body)
					}
					if rt.method == "PUT" && strings.Contains(rt.pattern, "/content/") { // text/ saves existing files only
						if r.status != http.StatusCreated || !fileIs(filepath.Join(jail, sp.literal), "new content") {
							t.Errorf("PUT did not write the literal name %q in the jail: %d %s", sp.literal, r.status, r.body)
						}
						_ = os.Remove(filepath.Join(jail, sp.literal))
					}
				}
			})
		}
	}

	// Nothing outside the jail changed and the other system is intact.
	if !fileIs(filepath.Join(dir, "victim"), "unchanged") || !fileIs(filepath.Join(jail, "keep"), "unchanged") {
		t.Error("a file outside the intended path changed")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the parent of the jail has %d entries, want 2 (jail, victim)", len(entries))
	}
	if r := e.do("alice", "GET", "/v1/systems/victim", nil); r.status != 200 {
		t.Errorf("system victim: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/victim/credential", nil); r.status != 200 {
		t.Errorf("credential of victim: %d %s", r.status, r.body)
	}
}

// TestRoutesNormaliseWithoutRedirect: outside file paths, repeated slashes and dot segments are
// resolved before routing, without a redirect that would drop a PUT body; an encoded slash in a
// single-segment wildcard stays data.
func TestRoutesNormaliseWithoutRedirect(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	cred := map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)}
	cases := []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "//v1//systems//hpc", nil, 200},
		{"GET", "/v1/systems/./hpc/", nil, 404}, // a trailing slash is kept: no such route
		{"GET", "/v1/systems/x/../hpc", nil, 200},
		{"PUT", "/v1//systems/hpc/./credential", cred, 200},
		{"GET", "/v1/systems/x%2F..%2Fhpc", nil, 404}, // {id} is "x/../hpc", not a path
		{"DELETE", "/v1/systems/hpc%2Fcredential", nil, 404},
	}
	for _, c := range cases {
		var body io.Reader
		if c.body != nil {
			j, _ := json.Marshal(c.body)
			body = bytes.NewReader(j)
		}
		r := e.raw("alice", c.method, c.path, body, "application/json")
		if r.status != c.want {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, r.status, c.want, r.body)
		}
	}
	if r := e.do("alice", "GET", "/v1/systems/hpc/credential", nil); r.status != 200 {
		t.Errorf("credential gone: %d %s", r.status, r.body)
	}
}

// TestRewritePath checks the rewriting rule itself on escaped paths.
func TestRewritePath(t *testing.T) {
	prefixes := [][]string{{"v1", "systems", "", "files"}}
	cases := []struct{ in, wantRaw string }{
		{"/v1/systems/a/files/x%2F..%2F..%2Fvictim", "/v1/systems/a/files/x%2F..%2F..%2Fvictim"},
		{"/v1/systems/a/files/../../victim", "/v1/systems/a/files/..%2F..%2Fvictim"},
		{"/v1//systems/a/./files//x", "/v1/systems/a/files/%2Fx"},
		{"/v1/systems/a/b/../files/c", "/v1/systems/a/files/c"},
		{"/v1/systems/a/files", "/v1/systems/a/files"},
		{"//v1/systems/", "/v1/systems/"},
		{"/v1/systems/a/../../..", "/"},
	}
	for _, c := range cases {
		u, err := url.ParseRequestURI(c.in)
		if err != nil {
			t.Fatal(err)
		}
		rewritePath(u, prefixes)
		if got := u.EscapedPath(); got != c.wantRaw {
			t.Errorf("%s: %s, want %s", c.in, got, c.wantRaw)
		}
	}
}
