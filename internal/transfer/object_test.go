package transfer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/storage"
	s3store "github.com/sshapi/sshapi/internal/storage/s3"
)

// addStorage registers backend b as owner's system name.
func (s *systems) addStorage(owner, name string, b storage.Backend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]System{}
	}
	s.m[owner+"/"+name] = System{Storage: b}
}

// bucket returns a backend on a fresh bucket of srv, reached at endpoint (srv.Endpoint when
// empty, else a proxy in front of it).
func bucket(t testing.TB, srv *s3test.Server, endpoint string) *s3store.Backend {
	t.Helper()
	if endpoint == "" {
		endpoint = srv.Endpoint
	}
	b, err := s3store.New(s3store.Config{Endpoint: endpoint, Bucket: srv.Bucket(t), PathStyle: true,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// objectSHA reads object p of b whole and returns its sha256.
func objectSHA(t testing.TB, b storage.Backend, p string) string {
	t.Helper()
	rc, err := b.Open(t.Context(), p, 0, -1, "")
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// multipartUploads lists the incomplete multipart uploads of b's bucket.
func multipartUploads(t testing.TB, b *s3store.Backend, bucket string) int {
	t.Helper()
	out, err := b.Client().ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Uploads)
}

// objectTree writes the test tree under root and returns each file's sha256 by relative path:
// nested directories, an empty directory, an empty file, files of exactly one and two parts,
// and a file of several parts with a short last one.
func objectTree(t *testing.T, srv *sshtest.Server, root string, part int64) map[string]string {
	t.Helper()
	for _, d := range []string{"a/b/c", "empty", "z"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]int64{"top.txt": 11, "a/empty.bin": 0, "a/b/one-part.bin": part, "a/b/c/two-parts.bin": 2 * part,
		"z/multi.bin": 3*part + 12345}
	want := map[string]string{}
	seed := uint64(10)
	for rel, size := range files {
		seed++
		want[rel] = randomFile(t, filepath.Join(root, rel), size, seed)
	}
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		owned(t, srv, p)
		return err
	})
	return want
}

// TestObjectTransferTree moves a tree SFTP→S3, S3→S3 (another bucket) and S3→SFTP, each
// verified: every file arrives with its SHA-256, recorded in its item; empty directories
// survive; nothing unfinished is left in either bucket.
func TestObjectTransferTree(t *testing.T) {
	const part = 5 << 20
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	srv := s3test.New(t)
	s1, s2 := bucket(t, srv, ""), bucket(t, srv, "")
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	h.sys.addStorage("alice", "s1", s1)
	h.sys.addStorage("alice", "s2", s2)
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	want := objectTree(t, a, filepath.Join(srcDir, "tree"), part)

	legs := []struct {
		name     string
		src, dst Endpoint
		check    func(t *testing.T, rel, sum string)
	}{
		{"sftp-to-s3", Endpoint{System: "a", Path: filepath.Join(srcDir, "tree")}, Endpoint{System: "s1", Path: "/copy"},
			func(t *testing.T, rel, sum string) {
				if got := objectSHA(t, s1, "/copy/"+rel); got != sum {
					t.Fatalf("s1 %s: sha256 %s, want %s", rel, got, sum)
				}
			}},
		{"s3-to-s3", Endpoint{System: "s1", Path: "/copy"}, Endpoint{System: "s2", Path: "/again"},
			func(t *testing.T, rel, sum string) {
				if got := objectSHA(t, s2, "/again/"+rel); got != sum {
					t.Fatalf("s2 %s: sha256 %s, want %s", rel, got, sum)
				}
			}},
		{"s3-to-sftp", Endpoint{System: "s2", Path: "/again"}, Endpoint{System: "b", Path: filepath.Join(dstDir, "back")},
			func(t *testing.T, rel, sum string) {
				if got := fileSHA(t, filepath.Join(dstDir, "back", rel)); got != sum {
					t.Fatalf("b %s: sha256 %s, want %s", rel, got, sum)
				}
			}},
	}
	for _, leg := range legs {
		t.Run(leg.name, func(t *testing.T) {
			tr := h.submit("alice", Request{Source: leg.src, Destination: leg.dst, Recursive: true, ChunkSize: part, Streams: 3})
			tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
			if tr.Status != StatusSucceeded || tr.FilesTotal != int64(len(want)) || tr.FilesDone != tr.FilesTotal {
				t.Fatalf("transfer %+v", tr)
			}
			var total int64
			for _, n := range []int64{11, 0, part, 2 * part, 3*part + 12345} {
				total += n
			}
			if tr.BytesTotal != total || tr.BytesDone != total {
				t.Fatalf("bytes %d/%d, want %d", tr.BytesDone, tr.BytesTotal, total)
			}
			for rel, sum := range want {
				leg.check(t, rel, sum)
			}
			items, err := h.eng.Items(t.Context(), "alice", tr.ID, -1, 0, "")
			if err != nil {
				t.Fatal(err)
			}
			sums := 0
			for _, it := range items {
				if it.Kind != KindFile {
					continue
				}
				rel := it.Source[strings.Index(it.Source, "/tree/")+len("/tree/"):]
				if i := strings.Index(it.Source, "/copy/"); i >= 0 {
					rel = it.Source[i+len("/copy/"):]
				}
				if i := strings.Index(it.Source, "/again/"); i >= 0 {
					rel = it.Source[i+len("/again/"):]
				}
				if it.Status != ItemDone || it.SHA256 != want[rel] {
					t.Fatalf("item %+v, want sha256 %s", it, want[rel])
				}
				sums++
			}
			if sums != len(want) {
				t.Fatalf("%d file items, want %d", sums, len(want))
			}
			if n := multipartUploads(t, s1, bucketName(s1)) + multipartUploads(t, s2, bucketName(s2)); n != 0 {
				t.Fatalf("%d incomplete multipart uploads left", n)
			}
		})
	}
	if fi, err := os.Stat(filepath.Join(dstDir, "back", "empty")); err != nil || !fi.IsDir() {
		t.Fatalf("the empty directory did not survive the round trip: %v", err)
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// bucketName is b's bucket.
func bucketName(b *s3store.Backend) string { return b.Bucket() }

// partProxy is an HTTP proxy in front of an S3 server that counts the parts uploaded through it
// (by part number) and can corrupt one byte of the body of one part upload.
type partProxy struct {
	*httptest.Server
	mu        sync.Mutex
	puts      map[string]int // part number → uploads seen (answered 200)
	corrupt   string         // part number whose next upload gets a flipped byte
	refused   []string       // error codes the server answered corrupted uploads with
	corrupted int
}

func newPartProxy(t testing.TB, upstream string) *partProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &partProxy{puts: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a killed server is expected
	rp.ModifyResponse = func(res *http.Response) error {
		req := res.Request
		n := req.URL.Query().Get("partNumber")
		if req.Method != http.MethodPut || n == "" {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if res.StatusCode == http.StatusOK {
			p.puts[n]++
		} else if req.Header.Get("X-Test-Corrupted") != "" {
			body, _ := io.ReadAll(res.Body)
			res.Body = io.NopCloser(bytes.NewReader(body))
			code := string(body)
			if i := strings.Index(code, "<Code>"); i >= 0 {
				code = code[i+6:]
				code = code[:strings.Index(code, "<")]
			}
			p.refused = append(p.refused, code)
		}
		return nil
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.URL.Query().Get("partNumber")
		p.mu.Lock()
		flip := r.Method == http.MethodPut && n != "" && n == p.corrupt
		if flip {
			p.corrupt = ""
			p.corrupted++
		}
		p.mu.Unlock()
		if flip {
			r.Body = &flipper{ReadCloser: r.Body, at: 1000}
			r.Header.Set("X-Test-Corrupted", "1") // reaches the response hook; the server ignores it
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// count returns the uploads seen of part n.
func (p *partProxy) count(n string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.puts[n]
}

// flipper flips the byte at offset at of a body.
type flipper struct {
	io.ReadCloser
	pos, at int64
}

func (f *flipper) Read(b []byte) (int, error) {
	n, err := f.ReadCloser.Read(b)
	if f.pos <= f.at && f.at < f.pos+int64(n) {
		b[f.at-f.pos] ^= 0x55
	}
	f.pos += int64(n)
	return n, err
}

// TestObjectConfinement: an SFTP end of an object transfer is confined to the system's root
// directory like any other (a path outside fails the transfer at once), and a symlink in the
// source tree is neither followed nor copied (object storage has none): its item fails, naming
// why, while the files beside it arrive.
func TestObjectConfinement(t *testing.T) {
	h := newHarness(t, testConfig())
	a := sshtest.New(t, sshtest.Options{})
	srv := s3test.New(t)
	s := bucket(t, srv, "")
	dir := a.MkTemp(t)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	randomFile(t, filepath.Join(dir, "outside.bin"), 100, 1)
	want := randomFile(t, filepath.Join(root, "tree", "in.bin"), 100, 2)
	if err := os.Symlink(dir, filepath.Join(root, "tree", "escape")); err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		owned(t, a, p)
		return err
	})
	h.sys.add("alice", "a", a, "")
	h.sys.mu.Lock()
	sys := h.sys.m["alice/a"]
	sys.RootDir = root
	h.sys.m["alice/a"] = sys
	h.sys.mu.Unlock()
	h.sys.addStorage("alice", "s", s)

	for _, tc := range []struct{ name, path string }{
		{"absolute", filepath.Join(dir, "outside.bin")},
		{"dotdot", filepath.Join(root, "..", "outside.bin")},
		{"through the link", filepath.Join(root, "tree", "escape", "outside.bin")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: tc.path}, Destination: Endpoint{System: "s", Path: "/x"}})
			tr = h.wait("alice", tr.ID, time.Minute, nil)
			if tr.Status != StatusFailed || tr.Retries != 0 {
				t.Fatalf("transfer from outside the root: %s (retries %d) %s", tr.Status, tr.Retries, tr.Error)
			}
			if _, err := s.Stat(t.Context(), "/x"); err == nil {
				t.Fatal("a file from outside the root was copied")
			}
		})
	}
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: filepath.Join(root, "tree")}, Destination: Endpoint{System: "s", Path: "/t"},
		Recursive: true})
	tr = h.wait("alice", tr.ID, time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesDone != 1 {
		t.Fatalf("tree with a link: %+v", tr)
	}
	if got := objectSHA(t, s, "/t/in.bin"); got != want {
		t.Fatalf("in.bin: %s", got)
	}
	if _, err := s.Stat(t.Context(), "/t/escape/outside.bin"); err == nil {
		t.Fatal("the walk followed the link out of the root")
	}
	items, _ := h.eng.Items(t.Context(), "alice", tr.ID, -1, 0, ItemFailed)
	if len(items) != 1 || items[0].Kind != KindSymlink || !strings.Contains(items[0].Error, "symlinks") {
		t.Fatalf("failed items %+v", items)
	}
}
