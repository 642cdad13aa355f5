package transfer

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/s3test"
)

// copyCounter is an HTTP proxy in front of an S3 server that counts the PUT requests carrying
// data (object and part uploads) and those copying on the server (x-amz-copy-source).
type copyCounter struct {
	*httptest.Server
	mu           sync.Mutex
	uploads      int
	copies       int
	bytesThrough int64 // request body bytes of uploads
}

func newCopyCounter(t testing.TB, upstream string) *copyCounter {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	c := &copyCounter{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			c.mu.Lock()
			if r.Header.Get("X-Amz-Copy-Source") != "" {
				c.copies++
			} else if r.ContentLength > 0 {
				c.uploads++
				c.bytesThrough += r.ContentLength
			}
			c.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(c.Close)
	return c
}

// TestObjectServerCopyS3: a tree between two buckets of one server (one credential) is copied
// on the server: no byte is uploaded through sshapi, a CopyObject per file; every file is
// verified by SHA-256 (the copy's, computed by the server, against the source's: kept by the
// server for a single-part object, read once for a multipart one) and recorded in its item.
func TestObjectServerCopyS3(t *testing.T) {
	h := newHarness(t, testConfig())
	srv := s3test.New(t)
	cc := newCopyCounter(t, srv.Endpoint)
	s1, s2 := bucket(t, srv, cc.URL), bucket(t, srv, cc.URL)
	h.sys.addStorage("alice", "s1", s1)
	h.sys.addStorage("alice", "s2", s2)
	local := t.TempDir()
	want := map[string]string{
		"multi.bin": randomFile(t, filepath.Join(local, "multi.bin"), 3*faultPart+77, 1),
		"small.bin": randomFile(t, filepath.Join(local, "small.bin"), 1000, 2),
	}
	putObject(t, s1, "/t/multi.bin", filepath.Join(local, "multi.bin")) // parts: a composite checksum
	putObject(t, s1, "/t/small.bin", filepath.Join(local, "small.bin")) // one request: a full SHA-256
	cc.mu.Lock()
	cc.uploads, cc.copies, cc.bytesThrough = 0, 0, 0
	cc.mu.Unlock()
	tr := h.submit("alice", Request{Source: Endpoint{System: "s1", Path: "/t"}, Destination: Endpoint{System: "s2", Path: "/u"},
		Recursive: true, ChunkSize: faultPart})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesDone != 2 {
		t.Fatalf("transfer %+v", tr)
	}
	for rel, sum := range want {
		if got := objectSHA(t, s2, "/u/"+rel); got != sum {
			t.Fatalf("%s: sha256 %s, want %s", rel, got, sum)
		}
	}
	items, err := h.eng.Items(t.Context(), "alice", tr.ID, -1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.Kind == KindFile && (it.Status != ItemDone || it.SHA256 != want[filepath.Base(it.Source)]) {
			t.Fatalf("item %+v", it)
		}
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.uploads != 0 || cc.copies != 2 {
		t.Fatalf("%d uploads (%d bytes) and %d server-side copies; want none and 2", cc.uploads, cc.bytesThrough, cc.copies)
	}
	if size := int64(3*faultPart + 77); tr.BytesRead != size || tr.BytesDone != size+1000 {
		t.Fatalf("read %d bytes, done %d; want the multipart source read once (%d) to verify it", tr.BytesRead, tr.BytesDone, size)
	}
	if n := multipartUploads(t, s2, s2.Bucket()); n != 0 {
		t.Fatalf("%d incomplete multipart uploads", n)
	}
}
