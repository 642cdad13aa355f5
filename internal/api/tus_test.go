package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	sshclient "github.com/sshapi/sshapi/internal/client"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/postgres"
	"github.com/sshapi/sshapi/internal/store/sqlite"
)

// tusMetadata encodes Upload-Metadata from key, value pairs.
func tusMetadata(kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, kv[i]+" "+base64.StdEncoding.EncodeToString([]byte(kv[i+1])))
	}
	return strings.Join(parts, ",")
}

// tusDo sends a tus request to base+path as user with body (nil for none).
func tusDo(t testing.TB, e *env, base, user, method, path string, body io.Reader, hdr ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token(user))
	req.Header.Set("Tus-Resumable", "1.0.0")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// tusCreate creates an upload of length bytes to dest and returns its URL path.
func tusCreate(t testing.TB, e *env, user, system, dest string, length int, kv ...string) string {
	t.Helper()
	r := tusDo(t, e, e.url, user, "POST", "/v1/systems/"+system+"/uploads", nil,
		"Upload-Length", strconv.Itoa(length), "Upload-Metadata", tusMetadata(append([]string{"path", dest}, kv...)...))
	if r.status != 201 || r.header.Get("Location") == "" || r.header.Get("Tus-Resumable") != "1.0.0" {
		t.Fatalf("create: %d %v %s", r.status, r.header, r.body)
	}
	return r.header.Get("Location")
}

func tusPatch(t testing.TB, e *env, base, user, loc string, off int, data []byte) resp {
	t.Helper()
	return tusDo(t, e, base, user, "PATCH", loc, bytes.NewReader(data), "Content-Type", "application/offset+octet-stream",
		"Upload-Offset", strconv.Itoa(off))
}

func tusOffset(t testing.TB, e *env, base, user, loc string) int {
	t.Helper()
	r := tusDo(t, e, base, user, "HEAD", loc, nil)
	if r.status != 200 {
		t.Fatalf("HEAD %s: %d", loc, r.status)
	}
	n, err := strconv.Atoi(r.header.Get("Upload-Offset"))
	if err != nil || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("HEAD headers: %v", r.header)
	}
	return n
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// onlyFiles lists dir's names (part files included) for "nothing left behind" checks.
func onlyFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestTusProtocol(t *testing.T) {
	e := newEnvConfig(t, Config{TusMaxSize: 8 << 20}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	base := "/v1/systems/hpc/uploads"

	// Discovery.
	r := tusDo(t, e, e.url, "alice", "OPTIONS", base, nil, "Tus-Resumable", "")
	if r.status != 204 || r.header.Get("Tus-Version") != "1.0.0" || !strings.Contains(r.header.Get("Tus-Extension"), "creation") ||
		r.header.Get("Tus-Max-Size") != strconv.Itoa(8<<20) {
		t.Fatalf("OPTIONS: %d %v", r.status, r.header)
	}
	// Refusals at creation.
	for _, c := range []struct {
		status int
		hdr    []string
	}{
		{412, []string{"Tus-Resumable", "", "Upload-Length", "1", "Upload-Metadata", tusMetadata("path", dir+"/a")}},
		{400, []string{"Upload-Length", "x", "Upload-Metadata", tusMetadata("path", dir+"/a")}},
		{400, []string{"Upload-Length", "1"}},
		{400, []string{"Upload-Length", "1", "Upload-Metadata", tusMetadata("path", dir+"/a", "sha256", "zz")}},
		{413, []string{"Upload-Length", strconv.Itoa(8<<20 + 1), "Upload-Metadata", tusMetadata("path", dir+"/a")}},
	} {
		r := tusDo(t, e, e.url, "alice", "POST", base, nil, c.hdr...)
		if r.status != c.status || r.header.Get("Tus-Resumable") != "1.0.0" {
			t.Errorf("create %v: %d %s, want %d", c.hdr, r.status, r.body, c.status)
		}
		if c.status == 412 && r.header.Get("Tus-Version") != "1.0.0" {
			t.Errorf("412 without Tus-Version")
		}
	}

	data := randomBytes(3<<20 + 12345)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/big.bin", len(data), "sha256", sha256Hex(data))
	if !strings.HasPrefix(loc, base+"/") {
		t.Fatalf("Location %q", loc)
	}
	if names := onlyFiles(t, dir); len(names) != 1 || !files.IsTempName(names[0]) {
		t.Fatalf("after create: %v", names)
	}
	if n := tusOffset(t, e, e.url, "alice", loc); n != 0 {
		t.Fatalf("offset %d", n)
	}
	if r := tusPatch(t, e, e.url, "alice", loc, 5, data[:10]); r.status != 409 {
		t.Fatalf("wrong offset: %d %s", r.status, r.body)
	}
	if r := tusDo(t, e, e.url, "alice", "PATCH", loc, strings.NewReader("x"), "Content-Type", "text/plain", "Upload-Offset", "0"); r.status != 415 {
		t.Fatalf("wrong type: %d", r.status)
	}
	if r := tusPatch(t, e, e.url, "alice", loc, 0, append(bytes.Clone(data), 'x')); r.status != 413 {
		t.Fatalf("beyond the length: %d %s", r.status, r.body)
	}
	half := len(data) / 2
	r = tusPatch(t, e, e.url, "alice", loc, 0, data[:half])
	if r.status != 204 || r.header.Get("Upload-Offset") != strconv.Itoa(half) {
		t.Fatalf("first half: %d %v %s", r.status, r.header, r.body)
	}
	if n := tusOffset(t, e, e.url, "alice", loc); n != half {
		t.Fatalf("offset %d, want %d", n, half)
	}
	if _, err := os.Stat(filepath.Join(dir, "big.bin")); !os.IsNotExist(err) {
		t.Fatalf("destination appeared early: %v", err)
	}
	// Someone else does not see the upload.
	if r := tusDo(t, e, e.url, "bob", "HEAD", loc, nil); r.status != 404 {
		t.Fatalf("bob's HEAD: %d", r.status)
	}
	r = tusPatch(t, e, e.url, "alice", loc, half, data[half:])
	if r.status != 204 || r.header.Get("Upload-Offset") != strconv.Itoa(len(data)) {
		t.Fatalf("second half: %d %s", r.status, r.body)
	}
	got, err := os.ReadFile(filepath.Join(dir, "big.bin"))
	if err != nil || sha256Hex(got) != sha256Hex(data) {
		t.Fatalf("content: %v (%d bytes)", err, len(got))
	}
	if names := onlyFiles(t, dir); len(names) != 1 {
		t.Fatalf("left behind: %v", names)
	}
	if r := tusDo(t, e, e.url, "alice", "HEAD", loc, nil); r.status != 404 {
		t.Fatalf("finished upload: %d", r.status)
	}
	if r := tusDo(t, e, e.url, "alice", "HEAD", base+"/nosuchupload", nil); r.status != 404 {
		t.Fatalf("unknown: %d", r.status)
	}
	if r := tusPatch(t, e, e.url, "alice", base+"/nosuchupload", 0, []byte("x")); r.status != 404 {
		t.Fatalf("unknown PATCH: %d", r.status)
	}

	// An existing file is refused without overwrite, replaced with it.
	r = tusDo(t, e, e.url, "alice", "POST", base, nil, "Upload-Length", "3", "Upload-Metadata", tusMetadata("path", dir+"/big.bin"))
	if r.status != 409 {
		t.Fatalf("existing without overwrite: %d %s", r.status, r.body)
	}
	// Creation with upload, overwriting.
	r = tusDo(t, e, e.url, "alice", "POST", base, strings.NewReader("new"), "Upload-Length", "3", "Content-Type", "application/offset+octet-stream",
		"Upload-Metadata", tusMetadata("path", dir+"/big.bin", "overwrite", "true"))
	if r.status != 201 || r.header.Get("Upload-Offset") != "3" {
		t.Fatalf("creation with upload: %d %v %s", r.status, r.header, r.body)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "big.bin")); string(got) != "new" {
		t.Fatalf("overwritten: %q", got)
	}
	// An empty file is complete at creation.
	tusCreate(t, e, "alice", "hpc", dir+"/empty", 0)
	if fi, err := os.Stat(filepath.Join(dir, "empty")); err != nil || fi.Size() != 0 {
		t.Fatalf("empty: %v", err)
	}

	// Termination removes the part file.
	loc = tusCreate(t, e, "alice", "hpc", dir+"/gone.bin", 100)
	if r := tusPatch(t, e, e.url, "alice", loc, 0, randomBytes(40)); r.status != 204 {
		t.Fatalf("patch: %d", r.status)
	}
	if r := tusDo(t, e, e.url, "alice", "DELETE", loc, nil); r.status != 204 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r := tusDo(t, e, e.url, "alice", "HEAD", loc, nil); r.status != 404 {
		t.Fatalf("terminated: %d", r.status)
	}
	if names := onlyFiles(t, dir); len(names) != 2 {
		t.Fatalf("after termination: %v", names)
	}

	// The audit records the completed upload like a PUT.
	var found bool
	for _, en := range e.do("alice", "GET", "/v1/audit?limit=100", nil).json(t)["entries"].([]any) {
		m := en.(map[string]any)
		if m["action"] == "files.upload" && strings.Contains(fmt.Sprint(m["detail"]), "complete") && fmt.Sprint(m["paths"]) == "["+dir+"/big.bin]" {
			found = true
		}
	}
	if !found {
		t.Fatal("no audit entry for the completed upload")
	}
}

func TestTusChecksumMismatchLeavesNothing(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	data := randomBytes(100_000)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/x.bin", len(data), "sha256", sha256Hex([]byte("other")))
	if r := tusPatch(t, e, e.url, "alice", loc, 0, data[:50_000]); r.status != 204 {
		t.Fatalf("patch: %d", r.status)
	}
	r := tusPatch(t, e, e.url, "alice", loc, 50_000, data[50_000:])
	if r.status != 422 || !strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("mismatch: %d %v %s", r.status, r.header, r.body)
	}
	if names := onlyFiles(t, dir); len(names) != 0 {
		t.Fatalf("left behind: %v", names)
	}
	if r := tusDo(t, e, e.url, "alice", "HEAD", loc, nil); r.status != 404 {
		t.Fatalf("failed upload: %d", r.status)
	}
}

// cutProxy forwards connections to target and cuts each one (both directions) once limit
// bytes of request went through.
func cutProxy(t *testing.T, target string, limit int64) string {
	u, _ := cutFirstProxy(t, target, limit, -1)
	return u
}

// cutFirstProxy is cutProxy cutting only the first cuts connections (-1: all); the others are
// forwarded whole. It also returns the count of connections accepted.
func cutFirstProxy(t *testing.T, target string, limit int64, cuts int64) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			lim := limit
			if cuts >= 0 && n.Add(1) > cuts {
				lim = 1 << 62
			}
			go func() {
				s, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				go func() { _, _ = io.Copy(c, s); c.Close() }()
				_, _ = io.CopyN(s, c, lim)
				c.Close()
				s.Close()
			}()
		}
	}()
	return "http://" + ln.Addr().String(), n
}

func TestTusResumeAfterCutConnection(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	data := randomBytes(6<<20 + 777)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/cut.bin", len(data), "sha256", sha256Hex(data))
	proxy := cutProxy(t, strings.TrimPrefix(e.url, "http://"), 3<<20+4321) // headers and ~3 MiB of body
	req, _ := http.NewRequest("PATCH", proxy+loc, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	req.Header.Set("Tus-Resumable", "1.0.0")
	req.Header.Set("Content-Type", "application/offset+octet-stream")
	req.Header.Set("Upload-Offset", "0")
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the cut PATCH answered %d", res.StatusCode)
	}
	// The server commits what it received and releases the upload; the client asks where to go on.
	var off int
	awaitState(t, "the cut PATCH to commit", func() bool { return tusOffset(t, e, e.url, "alice", loc) > 0 })
	awaitState(t, "the cut PATCH to end", func() bool { // it holds the upload until it ends: 423 till then
		off = tusOffset(t, e, e.url, "alice", loc)
		r := tusPatch(t, e, e.url, "alice", loc, off, nil)
		return r.status == 204
	})
	if off < 2<<20 || off > 3<<20+4321 {
		t.Fatalf("committed offset %d after a cut at ~3 MiB", off)
	}
	r := tusPatch(t, e, e.url, "alice", loc, off, data[off:])
	if r.status != 204 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	got, err := os.ReadFile(filepath.Join(dir, "cut.bin"))
	if err != nil || sha256Hex(got) != sha256Hex(data) {
		t.Fatalf("content after resume: %v (%d bytes)", err, len(got))
	}
}

func TestTusResumeAfterRestart(t *testing.T) {
	var dbPath string
	e := newEnvWith(t, func(dir string, d *Deps, _ **Server) { dbPath = filepath.Join(dir, "sshapi.db") })
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	data := randomBytes(2<<20 + 3)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/r.bin", len(data))
	if r := tusPatch(t, e, e.url, "alice", loc, 0, data[:1<<20]); r.status != 204 {
		t.Fatalf("patch: %d", r.status)
	}
	// A new instance: its own database handle, pool and access resolver on the same database.
	ctx := t.Context()
	db, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	pool := sshpool.New(sshpool.Config{}, e.api.log, nil)
	_ = pool.Start(ctx)
	t.Cleanup(func() { _ = pool.Stop(context.Background()) })
	d := e.api.deps
	d.Store, d.Pool, d.Registry, d.Gatherer = db, pool, nil, nil
	d.Access = access.New(access.Config{}, access.Deps{Store: db, Keyring: d.Keyring, Log: d.Log})
	hs := httptest.NewServer(New(Config{}, d).Handler())
	t.Cleanup(hs.Close)
	if n := tusOffset(t, e, hs.URL, "alice", loc); n != 1<<20 {
		t.Fatalf("offset on the new instance: %d", n)
	}
	if r := tusPatch(t, e, hs.URL, "alice", loc, 1<<20, data[1<<20:]); r.status != 204 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "r.bin")); !bytes.Equal(got, data) {
		t.Fatalf("content after restart (%d bytes)", len(got))
	}
}

func TestTusGranteeNeedsWrite(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	for _, g := range []map[string]any{
		{"principal": "user:bob", "path": dir, "access": "read"},
		{"principal": "user:carol", "path": dir, "access": "write"},
	} {
		if r := e.do("alice", "POST", "/v1/systems/hpc/grants", g); r.status != 201 {
			t.Fatalf("grant: %d %s", r.status, r.body)
		}
	}
	r := tusDo(t, e, e.url, "bob", "POST", "/v1/systems/alice:hpc/uploads", nil, "Upload-Length", "3",
		"Upload-Metadata", tusMetadata("path", dir+"/b.txt"))
	if r.status != 403 {
		t.Fatalf("read-only grantee: %d %s", r.status, r.body)
	}
	// Write access covers the grant's path only.
	r = tusDo(t, e, e.url, "carol", "POST", "/v1/systems/alice:hpc/uploads", nil, "Upload-Length", "3",
		"Upload-Metadata", tusMetadata("path", filepath.Dir(dir)+"/outside.txt"))
	if r.status != 403 {
		t.Fatalf("outside the grant: %d %s", r.status, r.body)
	}
	loc := tusCreate(t, e, "carol", "alice:hpc", dir+"/c.txt", 3)
	if r := tusPatch(t, e, e.url, "carol", loc, 0, []byte("abc")); r.status != 204 {
		t.Fatalf("grantee patch: %d %s", r.status, r.body)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "c.txt")); string(got) != "abc" {
		t.Fatalf("grantee content %q", got)
	}
	// A grant revoked mid-upload ends it.
	loc = tusCreate(t, e, "carol", "alice:hpc", dir+"/d.txt", 3)
	var gid string
	for _, g := range e.do("alice", "GET", "/v1/systems/hpc/grants", nil).json(t)["grants"].([]any) {
		if m := g.(map[string]any); m["principal"] == "user:carol" {
			gid = m["id"].(string)
		}
	}
	if r := e.do("alice", "DELETE", "/v1/systems/hpc/grants/"+gid, nil); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := tusPatch(t, e, e.url, "carol", loc, 0, []byte("abc")); r.status != 403 && r.status != 404 {
		t.Fatalf("after revocation: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(dir, "d.txt")); !os.IsNotExist(err) {
		t.Fatalf("written after revocation: %v", err)
	}
}

func TestTusOwnerLimits(t *testing.T) {
	e := newEnvConfig(t, Config{TusMaxOpenPerOwner: 2, TusMaxBytesPerOwner: 1000}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	tusCreate(t, e, "alice", "hpc", dir+"/1", 400)
	r := tusDo(t, e, e.url, "alice", "POST", "/v1/systems/hpc/uploads", nil, "Upload-Length", "601", "Upload-Metadata", tusMetadata("path", dir+"/2"))
	if r.status != 429 {
		t.Fatalf("bytes bound: %d %s", r.status, r.body)
	}
	loc := tusCreate(t, e, "alice", "hpc", dir+"/2", 600)
	r = tusDo(t, e, e.url, "alice", "POST", "/v1/systems/hpc/uploads", nil, "Upload-Length", "0", "Upload-Metadata", tusMetadata("path", dir+"/3"))
	if r.status != 429 {
		t.Fatalf("open bound: %d %s", r.status, r.body)
	}
	if names := onlyFiles(t, dir); len(names) != 2 {
		t.Fatalf("a refused create left a part file: %v", names)
	}
	if r := tusDo(t, e, e.url, "alice", "DELETE", loc, nil); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	tusCreate(t, e, "alice", "hpc", dir+"/3", 0)
}

func TestTusConcurrentPatchLocked(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	data := randomBytes(3 << 20)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/l.bin", len(data))
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	var first resp
	wg.Add(1)
	go func() {
		defer wg.Done()
		first = tusDo(t, e, e.url, "alice", "PATCH", loc, pr, "Content-Type", "application/offset+octet-stream", "Upload-Offset", "0",
			"Content-Length", "")
	}()
	if _, err := pw.Write(data[:1<<20]); err != nil {
		t.Fatal(err)
	}
	// The first PATCH holds the upload: a second one at its offset is refused with 423.
	awaitState(t, "the first PATCH to commit", func() bool { return tusOffset(t, e, e.url, "alice", loc) == 1<<20 })
	if r := tusPatch(t, e, e.url, "alice", loc, 1<<20, data[1<<20:]); r.status != 423 {
		t.Fatalf("concurrent PATCH: %d %s", r.status, r.body)
	}
	if r := tusDo(t, e, e.url, "alice", "DELETE", loc, nil); r.status != 423 {
		t.Fatalf("concurrent DELETE: %d %s", r.status, r.body)
	}
	if _, err := pw.Write(data[1<<20:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	wg.Wait()
	if first.status != 204 {
		t.Fatalf("first PATCH: %d %s", first.status, first.body)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "l.bin")); !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
}

func TestTusExpiredUploadsSwept(t *testing.T) {
	e := newEnvConfig(t, Config{TusExpiry: time.Second}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/e.bin", 10)
	if r := tusPatch(t, e, e.url, "alice", loc, 0, []byte("12345")); r.status != 204 {
		t.Fatalf("patch: %d", r.status)
	}
	time.Sleep(1100 * time.Millisecond)
	if r := tusDo(t, e, e.url, "alice", "HEAD", loc, nil); r.status != 410 {
		t.Fatalf("expired HEAD: %d", r.status)
	}
	sw := e.api.UploadSweeper(50 * time.Millisecond)
	sw.Start(t.Context())
	defer sw.Stop()
	awaitState(t, "the sweep", func() bool { return len(onlyFiles(t, dir)) == 0 })
	awaitState(t, "the row to go", func() bool {
		_, err := e.api.deps.Store.GetUpload(t.Context(), "alice", strings.TrimPrefix(loc, "/v1/systems/hpc/uploads/"))
		return errors.Is(err, store.ErrNotFound)
	})
}

// TestTusTwoInstancesOnPostgres: two instances on one PostgreSQL database share uploads: while
// one instance's PATCH holds an upload the other refuses a PATCH with 423 (the lease is the
// database's), and the other continues the upload once the first ends.
func TestTusTwoInstancesOnPostgres(t *testing.T) {
	c := pgtest.New(t)
	dsn := c.NewDatabase(t)
	openPG := func() *postgres.DB {
		db, err := postgres.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) { d.Store = openPG() })
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	ctx := t.Context()
	pool := sshpool.New(sshpool.Config{}, e.api.log, nil)
	_ = pool.Start(ctx)
	t.Cleanup(func() { _ = pool.Stop(context.Background()) })
	d := e.api.deps
	db := openPG()
	d.Store, d.Pool, d.Registry, d.Gatherer = db, pool, nil, nil
	d.Access = access.New(access.Config{}, access.Deps{Store: db, Keyring: d.Keyring, Log: d.Log})
	other := httptest.NewServer(New(Config{}, d).Handler())
	t.Cleanup(other.Close)

	data := randomBytes(3 << 20)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/pg.bin", len(data), "sha256", sha256Hex(data))
	pr, pw := io.Pipe()
	done := make(chan resp, 1)
	go func() {
		done <- tusDo(t, e, e.url, "alice", "PATCH", loc, pr, "Content-Type", "application/offset+octet-stream", "Upload-Offset", "0")
	}()
	if _, err := pw.Write(data[:1<<20]); err != nil {
		t.Fatal(err)
	}
	awaitState(t, "the first instance to commit", func() bool { return tusOffset(t, e, other.URL, "alice", loc) == 1<<20 })
	if r := tusPatch(t, e, other.URL, "alice", loc, 1<<20, data[1<<20:]); r.status != 423 {
		t.Fatalf("PATCH on the other instance while the first writes: %d %s", r.status, r.body)
	}
	pw.Close() // the first PATCH ends after 1 MiB
	if r := <-done; r.status != 204 || r.header.Get("Upload-Offset") != strconv.Itoa(1<<20) {
		t.Fatalf("first PATCH: %d %v %s", r.status, r.header, r.body)
	}
	if r := tusPatch(t, e, other.URL, "alice", loc, 1<<20, data[1<<20:]); r.status != 204 {
		t.Fatalf("the rest on the other instance: %d %s", r.status, r.body)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pg.bin")); !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
}

// TestTusGoClientResumes: the CLI's client (internal/client) continues from the committed offset
// after its connection is cut in the middle of its PATCH.
func TestTusGoClientResumes(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	data := randomBytes(5<<20 + 99)
	proxy, conns := cutFirstProxy(t, strings.TrimPrefix(e.url, "http://"), 2<<20, 1)
	c := sshclient.New(proxy, e.token("alice"))
	var offsets []int64
	err := c.UploadResumable(t.Context(), "hpc", dir+"/go.bin", bytes.NewReader(data), int64(len(data)),
		sshclient.ResumableOptions{SHA256: sha256Hex(data), Progress: func(off int64) { offsets = append(offsets, off) }})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "go.bin")); !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
	if conns.Load() < 2 {
		t.Fatalf("%d connections: the first was not cut", conns.Load())
	}
	if len(offsets) != 1 || offsets[0] != int64(len(data)) {
		t.Fatalf("progress %v: want one PATCH after the cut, to the end", offsets)
	}
	if names := onlyFiles(t, dir); len(names) != 1 {
		t.Fatalf("left behind: %v", names)
	}
}

// TestTusStripedSmallPatches sends a file in PATCHes smaller than the striping threshold, each
// on a connection of its own sent as soon as the last one answered, over an existing file of
// mode 0640: every PATCH succeeds (the upload's lease is given back before the answer, not once
// the handles are closed after it), those made while the upload had the threshold's worth left
// are striped (the decision is on what the upload has left, not on the PATCH) over no more
// channels than the PATCH keeps busy, and the file has the bytes and keeps its mode.
func TestTusStripedSmallPatches(t *testing.T) {
	cfg := stripeConfig()
	cfg.StripeMinBytes = 2 << 20
	e := newEnvConfig(t, cfg, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	randomFile(t, e, dir, "s.bin", 10)
	if err := os.Chmod(filepath.Join(dir, "s.bin"), 0o640); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(5<<20 + 333)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/s.bin", len(data), "sha256", sha256Hex(data), "overwrite", "true")
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	const patch = 256 << 10 // two 64 KiB chunks on each of 2 channels: no more are asked for
	before := strings.Count(e.log.String(), "striping a file transfer")
	wantStriped := 0
	for off := 0; off < len(data); off += patch {
		if len(data)-off >= int(cfg.StripeMinBytes) {
			wantStriped++
		}
		end := min(off+patch, len(data))
		req, _ := http.NewRequest("PATCH", e.url+loc, bytes.NewReader(data[off:end]))
		req.Header.Set("Authorization", "Bearer "+e.token("alice"))
		req.Header.Set("Tus-Resumable", "1.0.0")
		req.Header.Set("Content-Type", "application/offset+octet-stream")
		req.Header.Set("Upload-Offset", strconv.Itoa(off))
		res, err := fresh.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 204 || res.Header.Get("Upload-Offset") != strconv.Itoa(end) {
			t.Fatalf("PATCH at %d: %d, Upload-Offset %q: %s", off, res.StatusCode, res.Header.Get("Upload-Offset"), b)
		}
	}
	if n := strings.Count(e.log.String(), "striping a file transfer") - before; n != wantStriped {
		t.Fatalf("%d PATCHes striped, want %d (those sent with %d bytes or more left)", n, wantStriped, cfg.StripeMinBytes)
	}
	for _, line := range strings.Split(e.log.String(), "\n") {
		if strings.Contains(line, "striping a file transfer") && !strings.Contains(line, "channels=2 ") {
			t.Fatalf("a PATCH of %d bytes striped over more channels than it keeps busy: %s", patch, line)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "s.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("content: %v, %d bytes", err, len(got))
	}
	if fi, err := os.Stat(filepath.Join(dir, "s.bin")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode after the upload: %v %v", fi, err)
	}
	assertOnly(t, dir, "s.bin")
}

// TestSpanChannels: a transfer asks for no more stripe channels than its bytes keep busy, two
// chunks each (a PATCH of 8 MiB in 1 MiB chunks: 4), and an unknown span sets no limit.
func TestSpanChannels(t *testing.T) {
	s := &Server{cfg: Config{DownloadBufferBytes: 1 << 20}}
	tests := []struct {
		span int64
		want int
	}{
		{-1, math.MaxInt},
		{0, 0},
		{1, 1},
		{2 << 20, 1},
		{2<<20 + 1, 2},
		{8 << 20, 4},
		{1 << 30, 512},
	}
	for _, tc := range tests {
		if got := s.spanChannels(tc.span); got != tc.want {
			t.Errorf("spanChannels(%d) = %d, want %d", tc.span, got, tc.want)
		}
	}
}
