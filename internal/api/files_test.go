package api

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// remote returns the URL path segment for an absolute remote path (each segment escaped).
func remote(p string) string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func chownTree(t testing.TB, root, user string) {
	t.Helper()
	if out, err := exec.Command("chown", "-R", user+":", root).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
}

func TestFilesRoutes(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("line1\nline2\nline3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Symlink("missing-target", filepath.Join(dir, "dangling"))
	_ = os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	chownTree(t, dir, e.srv.User)
	base := "/v1/systems/hpc"
	D := remote(dir)

	// Listing: sorted, dangling symlink listed, double slashes normalised.
	r := e.do("alice", "GET", base+"/ls//"+D+"//", nil)
	var l struct {
		Path    string
		Entries []struct {
			Name, Type, Mode string
			LinkTarget       string `json:"link_target"`
		}
	}
	if err := json.Unmarshal(r.body, &l); err != nil || r.status != 200 {
		t.Fatalf("ls: %d %s", r.status, r.body)
	}
	var names []string
	for _, en := range l.Entries {
		names = append(names, en.Name+":"+en.Type)
	}
	if strings.Join(names, ",") != "dangling:symlink,hello.txt:file,sub:dir" || l.Entries[0].LinkTarget != "missing-target" || l.Entries[1].Mode != "0644" {
		t.Fatalf("ls entries %v (%s)", names, r.body)
	}
	// Home-relative.
	if r := e.do("alice", "GET", base+"/ls/~/"+filepath.Base(dir), nil); r.status != 200 || !strings.Contains(string(r.body), "hello.txt") {
		t.Fatalf("ls ~: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", base+"/stat/"+D+"/hello.txt", nil); r.status != 200 || r.json(t)["size"] != float64(18) {
		t.Fatalf("stat: %d %s", r.status, r.body)
	}

	// Upload with checksum, download with Range and ETag.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	sum := sha256.Sum256(payload)
	r = e.do("alice", "PUT", base+"/content/"+D+"/up/data.bin?parents=true&mode=0600", string(payload), "X-Checksum-Sha256", hex.EncodeToString(sum[:]))
	if r.status != 201 || r.json(t)["sha256"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	if fi, err := os.Stat(filepath.Join(dir, "up", "data.bin")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("uploaded file: %v %v", fi, err)
	}
	r = e.do("alice", "GET", base+"/content/"+D+"/up/data.bin", nil)
	if r.status != 200 || !bytes.Equal(r.body, payload) || r.header.Get("Content-Length") != strconv.Itoa(len(payload)) {
		t.Fatalf("get: %d len %d", r.status, len(r.body))
	}
	tag := r.header.Get("ETag")
	if !strings.Contains(r.header.Get("Content-Disposition"), `filename=data.bin`) || tag == "" {
		t.Fatalf("headers %v", r.header)
	}
	if r := e.do("alice", "GET", base+"/content/"+D+"/up/data.bin", nil, "If-None-Match", tag); r.status != 304 {
		t.Fatalf("If-None-Match: %d", r.status)
	}
	r = e.do("alice", "GET", base+"/content/"+D+"/up/data.bin", nil, "Range", "bytes=100-115")
	if r.status != 206 || string(r.body) != string(payload[100:116]) || r.header.Get("Content-Range") != fmt.Sprintf("bytes 100-115/%d", len(payload)) {
		t.Fatalf("range: %d %q %v", r.status, r.body, r.header)
	}
	if r := e.do("alice", "GET", base+"/content/"+D+"/up/data.bin", nil, "Range", "bytes=99999999-"); r.status != 416 {
		t.Fatalf("unsatisfiable range: %d", r.status)
	}

	// Checksum mismatch: 422, original untouched, no temp file.
	r = e.do("alice", "PUT", base+"/content/"+D+"/hello.txt?overwrite=true&sha256="+strings.Repeat("0", 64), "changed")
	if r.status != 422 {
		t.Fatalf("mismatch: %d %s", r.status, r.body)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "hello.txt")); string(b) != "line1\nline2\nline3\n" {
		t.Fatalf("original changed: %q", b)
	}
	// Existing without overwrite: 409.
	if r := e.do("alice", "PUT", base+"/content/"+D+"/hello.txt", "x"); r.status != 409 {
		t.Fatalf("overwrite=false: %d %s", r.status, r.body)
	}

	// Multipart upload into a directory.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("file", "form.txt")
	fw.Write([]byte("from a browser"))
	mw.Close()
	r = e.do("alice", "POST", base+"/content/"+D+"/sub", mp.String(), "Content-Type", mw.FormDataContentType())
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "form.txt")); r.status != 201 || string(b) != "from a browser" {
		t.Fatalf("multipart: %d %s", r.status, r.body)
	}

	// head / tail / checksum / filetype / df.
	if m := e.do("alice", "GET", base+"/head/"+D+"/hello.txt?lines=1", nil).json(t); m["content"] != "line1\n" {
		t.Fatalf("head: %v", m)
	}
	if m := e.do("alice", "GET", base+"/tail/"+D+"/hello.txt?bytes=6", nil).json(t); m["content"] != "line3\n" {
		t.Fatalf("tail: %v", m)
	}
	if m := e.do("alice", "GET", base+"/checksum/"+D+"/up/data.bin", nil).json(t); m["checksum"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("checksum: %v", m)
	}
	if m := e.do("alice", "GET", base+"/filetype/"+D+"/hello.txt", nil).json(t); !strings.Contains(fmt.Sprint(m["type"]), "text") {
		t.Fatalf("filetype: %v", m)
	}
	if m := e.do("alice", "GET", base+"/df/"+D, nil).json(t); m["total_bytes"] == nil || m["total_bytes"].(float64) <= 0 {
		t.Fatalf("df: %v", m)
	}

	// ops.
	ops := []struct {
		op     string
		body   map[string]any
		status int
		check  func() bool
	}{
		{"mkdir", map[string]any{"path": dir + "/a/b", "parents": true}, 200, func() bool { return isDir(filepath.Join(dir, "a/b")) }},
		{"copy", map[string]any{"source": dir + "/hello.txt", "destination": dir + "/a/copy.txt"}, 200, func() bool { return fileIs(filepath.Join(dir, "a/copy.txt"), "line1\nline2\nline3\n") }},
		{"move", map[string]any{"source": dir + "/a/copy.txt", "destination": dir + "/a/moved.txt"}, 200, func() bool { return fileIs(filepath.Join(dir, "a/moved.txt"), "line1\nline2\nline3\n") }},
		{"chmod", map[string]any{"path": dir + "/a/moved.txt", "mode": "0640"}, 200, func() bool { fi, _ := os.Stat(filepath.Join(dir, "a/moved.txt")); return fi.Mode().Perm() == 0o640 }},
		{"symlink", map[string]any{"target": "moved.txt", "link": dir + "/a/link"}, 200, func() bool { t, _ := os.Readlink(filepath.Join(dir, "a/link")); return t == "moved.txt" }},
		{"compress", map[string]any{"sources": []string{dir + "/a"}, "archive": dir + "/a.tar.gz", "format": "tar.gz"}, 200, func() bool { return fileExists(filepath.Join(dir, "a.tar.gz")) }},
		{"extract", map[string]any{"archive": dir + "/a.tar.gz", "destination": dir + "/sub"}, 200, func() bool { return fileIs(filepath.Join(dir, "sub/a/moved.txt"), "line1\nline2\nline3\n") }},
		{"chown", map[string]any{"path": dir + "/a/moved.txt", "group": e.srv.User}, 200, func() bool { return true }},
		{"move", map[string]any{"source": dir + "/hello.txt", "destination": dir + "/sub/form.txt"}, 409, func() bool { return fileIs(filepath.Join(dir, "sub/form.txt"), "from a browser") }},
		{"mkdir", map[string]any{"path": dir + "/sub"}, 409, func() bool { return true }},
		{"copy", map[string]any{"source": dir + "/nope", "destination": dir + "/n2"}, 404, func() bool { return !fileExists(filepath.Join(dir, "n2")) }},
		{"chmod", map[string]any{"path": dir + "/hello.txt", "mode": "rwx"}, 400, func() bool { return true }},
		{"frobnicate", map[string]any{}, 404, func() bool { return true }},
	}
	for _, o := range ops {
		r := e.do("alice", "POST", base+"/ops/"+o.op, o.body)
		if r.status != o.status || !o.check() {
			t.Errorf("op %s %v: %d %s (check %v)", o.op, o.body, r.status, r.body, o.check())
		}
	}

	// Directory download as an archive.
	r = e.do("alice", "GET", base+"/content/"+D+"/a?archive=tar.gz", nil)
	if r.status != 200 {
		t.Fatalf("archive: %d %s", r.status, r.body)
	}
	gz, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	found := false
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if strings.HasSuffix(h.Name, "moved.txt") {
			b, _ := io.ReadAll(tr)
			found = string(b) == "line1\nline2\nline3\n"
		}
	}
	if !found {
		t.Fatal("archive lacks moved.txt")
	}
	if r := e.do("alice", "GET", base+"/content/"+D+"/a", nil); r.status != 409 {
		t.Fatalf("directory without archive: %d", r.status)
	}

	// Delete.
	if r := e.do("alice", "DELETE", base+"/files/"+D+"/a", nil); r.status != 409 {
		t.Fatalf("non-empty delete: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "DELETE", base+"/files/"+D+"/a?recursive=true", nil); r.status != 204 || isDir(filepath.Join(dir, "a")) {
		t.Fatalf("recursive delete: %d %s", r.status, r.body)
	}

	// Error mapping.
	errs := []struct {
		method, path string
		status       int
	}{
		{"GET", base + "/stat/" + D + "/missing", 404},
		{"GET", base + "/ls/root", 403},
		{"GET", base + "/content/etc/shadow", 403},
		{"PUT", base + "/content/etc/sshapi-should-not-exist", 403},
		{"GET", base + "/ls/" + D + "?limit=abc", 400},
		{"GET", base + "/checksum/" + D + "/hello.txt?algorithm=crc", 400},
		{"GET", base + "/ls/" + D + "/hello.txt", 409},
		{"GET", "/v1/systems/nope/ls/tmp", 404},
	}
	for _, c := range errs {
		if r := e.do("alice", c.method, c.path, "x"); r.status != c.status || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.body, c.status)
		}
	}
	if r := e.do("bob", "GET", base+"/ls/"+D, nil); r.status != 404 {
		t.Errorf("foreign system listing: %d", r.status)
	}
	if entries, _ := os.ReadDir(dir); hasTemp(entries) {
		t.Errorf("temporary files left: %v", entries)
	}
}

func isDir(p string) bool { fi, err := os.Stat(p); return err == nil && fi.IsDir() }
func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
func fileIs(p, content string) bool {
	b, err := os.ReadFile(p)
	return err == nil && string(b) == content
}
func hasTemp(entries []os.DirEntry) bool {
	for _, en := range entries {
		if strings.Contains(en.Name(), ".part") || strings.Contains(en.Name(), "sshapi-") {
			return true
		}
	}
	return false
}

// TestAbortedUploadLeavesNothing cuts an upload off mid-body: no partial file and the original
// is unchanged.
func TestAbortedUploadLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	orig := filepath.Join(dir, "keep.dat")
	os.WriteFile(orig, []byte("original"), 0o644)
	chownTree(t, dir, e.srv.User)
	u, _ := url.Parse(e.url)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PUT /v1/systems/hpc/content/%s/keep.dat?overwrite=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 10000000\r\n\r\n", remote(dir), e.token("alice"))
	c.Write(bytes.Repeat([]byte("z"), 3_000_000))
	awaitState(t, "the upload's temporary file", func() bool { entries, _ := os.ReadDir(dir); return len(entries) == 2 })
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		entries, _ := os.ReadDir(dir)
		if len(entries) == 1 && fileIs(orig, "original") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after an aborted upload: %v, original %v", entries, fileIs(orig, "original"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRootDirConfinement checks that a system with root_dir refuses every way out.
func TestRootDirConfinement(t *testing.T) {
	e := newEnv(t)
	dir := e.srv.MkTemp(t)
	os.Mkdir(filepath.Join(dir, "jail"), 0o755)
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("outside"), 0o644)
	os.Symlink(dir, filepath.Join(dir, "jail", "escape"))
	os.WriteFile(filepath.Join(dir, "jail", "ok.txt"), []byte("inside"), 0o644)
	chownTree(t, dir, e.srv.User)
	e.register("alice", "hpc")
	if r := e.do("alice", "PATCH", "/v1/systems/hpc", map[string]any{"root_dir": dir + "/jail"}); r.status != 200 {
		t.Fatal(string(r.body))
	}
	J := remote(dir + "/jail")
	if r := e.do("alice", "GET", "/v1/systems/hpc/content/"+J+"/ok.txt", nil); r.status != 200 || string(r.body) != "inside" {
		t.Fatalf("inside: %d %s", r.status, r.body)
	}
	cases := []struct{ method, path string }{
		{"GET", "/v1/systems/hpc/content/" + J + "/escape/secret.txt"},
		{"GET", "/v1/systems/hpc/content/" + J + "/%2e%2e/secret.txt"},
		{"GET", "/v1/systems/hpc/ls/etc"},
		{"PUT", "/v1/systems/hpc/content/" + J + "/escape/new.txt"},
	}
	for _, c := range cases {
		if r := e.do("alice", c.method, c.path, "x"); r.status != 403 {
			t.Errorf("%s %s: %d %s, want 403", c.method, c.path, r.status, r.body)
		}
	}
	if r := e.do("alice", "POST", "/v1/systems/hpc/ops/copy", map[string]any{"source": dir + "/secret.txt", "destination": dir + "/jail/stolen"}); r.status != 403 {
		t.Errorf("copy from outside: %d %s", r.status, r.body)
	}
	if fileExists(filepath.Join(dir, "new.txt")) || fileExists(filepath.Join(dir, "jail", "stolen")) {
		t.Error("a write escaped the root")
	}
}

// TestHostileNamesOverHTTP sends hostile names through URLs and JSON bodies.
func TestHostileNamesOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	chownTree(t, dir, e.srv.User)
	marker := fmt.Sprintf("pwned-%d", time.Now().UnixNano())
	names := []string{"a b", "it's", `q"uote`, "back`tick`", "$(touch " + marker + ")", "semi;colon", "new\nline", "-leading", "*?[glob", "ünïcødé", strings.Repeat("x", 255)}
	for _, n := range names {
		p := remote(dir) + "/" + url.PathEscape(n)
		if r := e.do("alice", "PUT", "/v1/systems/hpc/content/"+p, "data:"+n); r.status != 201 {
			t.Fatalf("put %q: %d %s", n, r.status, r.body)
		}
		if r := e.do("alice", "GET", "/v1/systems/hpc/content/"+p, nil); string(r.body) != "data:"+n {
			t.Fatalf("get %q: %d %q", n, r.status, r.body)
		}
		if r := e.do("alice", "GET", "/v1/systems/hpc/checksum/"+p, nil); r.status != 200 {
			t.Fatalf("checksum %q: %d %s", n, r.status, r.body)
		}
		if r := e.do("alice", "POST", "/v1/systems/hpc/ops/copy", map[string]any{"source": dir + "/" + n, "destination": dir + "/" + n + ".copy"}); r.status != 200 && len(n) < 250 {
			t.Fatalf("copy %q: %d %s", n, r.status, r.body)
		}
		if !fileIs(filepath.Join(dir, n), "data:"+n) {
			t.Fatalf("%q misplaced", n)
		}
	}
	if fileExists(filepath.Join(e.srv.Home, marker)) || fileExists(filepath.Join(dir, marker)) || fileExists("/"+marker) {
		t.Fatal("a hostile name was executed")
	}
}
