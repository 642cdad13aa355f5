package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// TestS3DownloadKeepsOneVersion: the bytes of one download come from the version whose ETag
// and size its headers carry. A proxy in front of the S3 server replaces the object right
// after the first GET of it is answered; the two parts of a two-range request are two GETs
// (http.ServeContent seeks between them), and the second must not bring the new version's
// bytes under the old version's ETag: the body ends short instead. The same holds for an
// archive of the folder, whose header for the file has the listed size.
func TestS3DownloadKeepsOneVersion(t *testing.T) {
	e := newS3Env(t)
	upstream, err := url.Parse(e.gw.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := strings.Repeat("a", 64), strings.Repeat("B", 64)
	var mu sync.Mutex
	replace := ""                      // the key to replace once
	var after func(*http.Request) bool // the request whose answer the replacement follows
	rp := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeHTTP(w, r)
		mu.Lock()
		key := replace
		if key != "" && after(r) {
			replace = ""
		} else {
			key = ""
		}
		mu.Unlock()
		if key != "" {
			e.putObject(key, v2)
		}
	}))
	t.Cleanup(proxy.Close)
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "px", "kind": "s3", "endpoint": proxy.URL, "bucket": e.bucket, "path_style": true}); r.status != 201 {
		t.Fatalf("create s3 system: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PUT", "/v1/systems/px/credential", map[string]any{"access_key_id": e.gw.AccessKeyID, "secret_access_key": e.gw.SecretAccessKey}); r.status != 200 {
		t.Fatalf("put s3 credential: %d %s", r.status, r.body)
	}

	getOf := func(key string) func(*http.Request) bool {
		return func(r *http.Request) bool {
			return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/"+key)
		}
	}
	// A folder's listing, not Stat's probe of whether the prefix has keys (max-keys=1).
	listing := func(r *http.Request) bool {
		return r.URL.Query().Has("list-type") && r.URL.Query().Get("max-keys") != "1"
	}
	for _, tc := range []struct {
		name, key, path string
		hdr             []string
		after           func(*http.Request) bool
	}{
		// The first range's GET, then the second's.
		{"two ranges", "r/f.bin", "/v1/systems/px/content/r/f.bin", []string{"Range", "bytes=0-9,40-49"}, getOf("r/f.bin")},
		// The folder's listing (which gave the tar header its size), then the file's GET.
		{"archive", "z/f.bin", "/v1/systems/px/content/z?archive=tar", nil, listing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.putObject(tc.key, v1)
			mu.Lock()
			replace, after = tc.key, tc.after
			mu.Unlock()
			r := e.do("alice", "GET", tc.path, nil, tc.hdr...)
			if r.status != http.StatusPartialContent && r.status != http.StatusOK {
				t.Fatalf("GET: %d %s", r.status, r.body)
			}
			mu.Lock()
			replaced := replace == ""
			mu.Unlock()
			if !replaced {
				t.Fatal("the object was never read through the proxy")
			}
			if bytes.Contains(r.body, []byte("BBBB")) {
				t.Fatalf("the download of the version %s carries bytes of the version that replaced it:\n%q", r.header.Get("ETag"), r.body)
			}
			if tc.name == "two ranges" && !bytes.Contains(r.body, []byte(strings.Repeat("a", 10))) {
				t.Fatalf("the first range is not the first version's: %q", r.body)
			}
		})
	}
}
