package api

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	sshclient "github.com/sshapi/sshapi/internal/client"
)

// bodyLimitProxy forwards requests to target and refuses, with 413 and without forwarding, a
// request whose body is announced larger than limit, as a proxy's body limit (nginx's
// client_max_body_size) does. It records the size of every PATCH and its answer.
func bodyLimitProxy(t *testing.T, target string, limit int64) (string, func() []string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	var mu sync.Mutex
	var log []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := 0
		if r.ContentLength > limit {
			status = http.StatusRequestEntityTooLarge
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(status)
			fmt.Fprint(w, "<html><body>413 Request Entity Too Large</body></html>")
		} else {
			rec := &statusRecorder{ResponseWriter: w}
			rp.ServeHTTP(rec, r)
			status = rec.status
		}
		if r.Method == http.MethodPatch {
			mu.Lock()
			log = append(log, fmt.Sprintf("%d:%d", r.ContentLength, status))
			mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), log...)
	}
}

// statusRecorder remembers the status written through it.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// TestTusGoClientHalvesOnBodyLimit: behind a proxy that refuses bodies over 3 MiB with 413, the
// Go client's default (1 GiB) PATCH is refused once, and the client halves its PATCHes and
// completes the upload from the committed offset; a limit under MinChunkSize ends the upload
// with the 413 once the PATCHes are that small.
func TestTusGoClientHalvesOnBodyLimit(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	data := randomBytes(5<<20 + 99)
	tests := []struct {
		name  string
		limit int64
		want  []string // PATCH content length:status as the proxy saw them
		fails bool
	}{
		// After each 413 the client asks the committed offset and sends an empty PATCH there
		// (0:204), as after any failed PATCH, then the halved PATCHes.
		{"3 MiB limit", 3 << 20, []string{"5242979:413", "0:204", "2621489:204", "2621489:204", "1:204"}, false},
		{"512 KiB limit", 512 << 10, []string{"5242979:413", "0:204", "2621489:413", "0:204", "1310744:413", "0:204", "1048576:413"}, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proxy, patches := bodyLimitProxy(t, e.url, tt.limit)
			c := sshclient.New(proxy, e.token("alice"))
			name := fmt.Sprintf("limited-%d.bin", i)
			err := c.UploadResumable(t.Context(), "hpc", dir+"/"+name, bytes.NewReader(data), int64(len(data)),
				sshclient.ResumableOptions{SHA256: sha256Hex(data), Retries: 1})
			got := patches()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("PATCHes through the proxy %v, want %v (err %v)", got, tt.want, err)
			}
			if tt.fails {
				if !sshclient.IsStatus(err, http.StatusRequestEntityTooLarge) {
					t.Fatalf("err %v, want the proxy's 413", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(b, data) {
				t.Fatal("content differs")
			}
		})
	}
}
