package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

// TestStaticRevalidates: a page file carries its ETag and "no-cache", a request naming that ETag
// gets 304 without a body, and a changed file gets a new ETag (so a browser never keeps a stale
// script and a reload costs no bodies).
func TestStaticRevalidates(t *testing.T) {
	for _, gz := range []bool{false, true} {
		files := fstest.MapFS{"a.js": {Data: []byte("export const a = 1;\n")}}
		h := newCompressedStatic(files)
		get := func(inm string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("GET", "/a.js", nil)
			if gz {
				r.Header.Set("Accept-Encoding", "gzip")
			}
			if inm != "" {
				r.Header.Set("If-None-Match", inm)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		first := get("")
		tag := first.Header().Get("ETag")
		if first.Code != 200 || tag == "" || first.Header().Get("Cache-Control") != "no-cache" || first.Body.Len() == 0 {
			t.Fatalf("gzip %v: first answer %d, ETag %q, Cache-Control %q, %d bytes", gz, first.Code, tag, first.Header().Get("Cache-Control"), first.Body.Len())
		}
		for _, inm := range []string{tag, "W/" + tag, `"other", ` + tag, "*"} {
			if again := get(inm); again.Code != http.StatusNotModified || again.Body.Len() != 0 {
				t.Fatalf("gzip %v: If-None-Match %s: %d with %d bytes", gz, inm, again.Code, again.Body.Len())
			}
		}
		if other := get(`"stale"`); other.Code != 200 || other.Body.Len() == 0 {
			t.Fatalf("gzip %v: a stale ETag got %d", gz, other.Code)
		}
		changed := newCompressedStatic(fstest.MapFS{"a.js": {Data: []byte("export const a = 2;\n")}})
		w := httptest.NewRecorder()
		changed.ServeHTTP(w, httptest.NewRequest("GET", "/a.js", nil))
		if w.Header().Get("ETag") == tag {
			t.Fatal("a changed file kept its ETag")
		}
	}
}

// TestPagePreloadsEveryModule: index.html preloads every module besides app.js, so the browser
// fetches them at once instead of discovering them import by import.
func TestPagePreloadsEveryModule(t *testing.T) {
	page, err := staticFS.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := fs.Glob(staticFS, "static/*.js")
	if err != nil || len(mods) < 2 {
		t.Fatalf("modules: %v %v", mods, err)
	}
	for _, m := range mods {
		name := strings.TrimPrefix(m, "static/")
		if name == "app.js" {
			continue
		}
		if !strings.Contains(string(page), `<link rel="modulepreload" href="/ui/static/`+name+`">`) {
			t.Errorf("index.html does not preload %s", name)
		}
	}
}
