package api

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/transfer"
)

// s3Env is an API env with a real versitygw and alice's S3 system "bkt" on a fresh bucket.
type s3Env struct {
	*env
	gw     *s3test.Server
	bucket string
	client *s3.Client // direct access to the bucket, for setup and for checking what is left
}

func newS3Env(t *testing.T) *s3Env { return newS3EnvWith(t, nil) }

// newS3EnvWith is newS3Env with a further extra for newEnvWith (run after the access layer is
// made).
func newS3EnvWith(t *testing.T, more func(dir string, d *Deps, s **Server)) *s3Env {
	t.Helper()
	gw := s3test.New(t)
	np, err := netpolicy.New(netpolicy.Config{AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(dir string, d *Deps, s **Server) {
		d.Network = np
		d.Access = access.New(access.Config{S3: access.S3Config{PartSize: 5 << 20, PartsInFlight: 3, MaxRequestsPerOwner: 8}},
			access.Deps{Store: d.Store, Keyring: d.Keyring, Network: np, Log: d.Log})
		d.Access.Start(t.Context())
		t.Cleanup(d.Access.Stop)
		if more != nil {
			more(dir, d, s)
		}
	})
	se := &s3Env{env: e, gw: gw, bucket: gw.Bucket(t)}
	se.client = s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(gw.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(gw.AccessKeyID, gw.SecretAccessKey, "")})
	se.registerS3("alice", "bkt", se.bucket, gw.AccessKeyID, gw.SecretAccessKey)
	return se
}

// registerS3 registers an S3 system for user and puts its keys.
func (e *s3Env) registerS3(user, id, bucket, keyID, secretKey string) {
	e.t.Helper()
	r := e.do(user, "POST", "/v1/systems", map[string]any{"id": id, "kind": "s3", "endpoint": e.gw.Endpoint, "bucket": bucket, "path_style": true})
	if r.status != 201 {
		e.t.Fatalf("create s3 system: %d %s", r.status, r.body)
	}
	r = e.do(user, "PUT", "/v1/systems/"+id+"/credential", map[string]any{"access_key_id": keyID, "secret_access_key": secretKey})
	if r.status != 200 {
		e.t.Fatalf("put s3 credential: %d %s", r.status, r.body)
	}
}

// putObject stores key directly in the bucket.
func (e *s3Env) putObject(key, body string) {
	e.t.Helper()
	if _, err := e.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &e.bucket, Key: &key, Body: strings.NewReader(body)}); err != nil {
		e.t.Fatalf("put %s: %v", key, err)
	}
}

// exists reports whether key is an object in the bucket.
func (e *s3Env) exists(key string) bool {
	_, err := e.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &e.bucket, Key: &key})
	return err == nil
}

// uploadsLeft is the number of incomplete multipart uploads in the bucket.
func (e *s3Env) uploadsLeft() int {
	e.t.Helper()
	out, err := e.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &e.bucket})
	if err != nil {
		e.t.Fatalf("list multipart uploads: %v", err)
	}
	return len(out.Uploads)
}

// problemField returns the first errors[].field of a problem answer.
func problemField(t *testing.T, r resp) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("not problem+json (%s): %s", ct, r.body)
	}
	errs, _ := r.json(t)["errors"].([]any)
	if len(errs) == 0 {
		return ""
	}
	f, _ := errs[0].(map[string]any)["field"].(string)
	return f
}

func TestS3SystemRegistration(t *testing.T) {
	e := newS3Env(t)
	ok := func(m map[string]any) map[string]any {
		out := map[string]any{"id": "x", "kind": "s3", "endpoint": e.gw.Endpoint, "bucket": e.bucket}
		for k, v := range m {
			if v == nil {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"metadata endpoint denied", ok(map[string]any{"endpoint": "http://169.254.169.254"}), "endpoint"},
		{"not http", ok(map[string]any{"endpoint": "ftp://127.0.0.1:21"}), "endpoint"},
		{"user info", ok(map[string]any{"endpoint": "http://k:s@127.0.0.1:9000"}), "endpoint"},
		{"query", ok(map[string]any{"endpoint": e.gw.Endpoint + "/?x=1"}), "endpoint"},
		{"no endpoint", ok(map[string]any{"endpoint": nil}), "endpoint"},
		{"ssh host on s3", ok(map[string]any{"host": "example.org"}), "host"},
		{"ssh port on s3", ok(map[string]any{"port": 22}), "port"},
		{"ssh host keys on s3", ok(map[string]any{"host_keys": []string{"ssh-ed25519 AAAA"}}), "host_keys"},
		{"bad bucket", ok(map[string]any{"bucket": "Bad_Bucket"}), "bucket"},
		{"dot-dot prefix", ok(map[string]any{"prefix": "a/../b"}), "prefix"},
		{"s3 bucket on ssh", map[string]any{"id": "y", "host": "127.0.0.1", "trust_on_first_use": true, "bucket": e.bucket}, "bucket"},
		{"s3 endpoint on ssh", map[string]any{"id": "y", "host": "127.0.0.1", "trust_on_first_use": true, "endpoint": e.gw.Endpoint}, "endpoint"},
		{"unknown kind", ok(map[string]any{"kind": "ftp"}), "kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("alice", "POST", "/v1/systems", tc.body)
			if r.status != 400 || problemField(t, r) != tc.field {
				t.Fatalf("want 400 naming %s, got %d %s", tc.field, r.status, r.body)
			}
		})
	}
	r := e.do("alice", "GET", "/v1/systems/bkt", nil)
	m := r.json(t)
	caps, _ := m["capabilities"].(map[string]any)
	if r.status != 200 || m["kind"] != "s3" || m["bucket"] != e.bucket || m["host"] != nil || caps["kind"] != "s3" ||
		caps["max_parts"] != float64(10000) || m["has_credential"] != true {
		t.Fatalf("GET s3 system: %d %s", r.status, r.body)
	}
	if has, _ := caps["capabilities"].([]any); len(has) != 1 || has[0] != "server_copy" {
		t.Fatalf("capabilities: %v", caps)
	}
	r = e.do("alice", "GET", "/v1/systems", nil)
	if !bytes.Contains(r.body, []byte(`"kind":"s3"`)) {
		t.Fatalf("list lacks the kind: %s", r.body)
	}
	if r := e.do("alice", "GET", "/sshapi/v2", nil); r.status != 200 || bytes.Contains(r.body, []byte(`"bkt"`)) {
		t.Fatalf("the study's named credentials list an S3 system: %d %s", r.status, r.body)
	}
	// PATCH: s3 fields change, SSH fields and a kind change are refused.
	r = e.do("alice", "PATCH", "/v1/systems/bkt", map[string]any{"prefix": "sub/dir", "region": "us-east-1", "description": "b"})
	if r.status != 200 || r.json(t)["prefix"] != "sub/dir" || r.json(t)["region"] != "us-east-1" {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	for body, field := range map[string]string{`{"host":"example.org"}`: "host", `{"kind":"ssh"}`: "kind", `{"endpoint":"http://169.254.169.254"}`: "endpoint"} {
		if r := e.do("alice", "PATCH", "/v1/systems/bkt", body); r.status != 400 || problemField(t, r) != field {
			t.Fatalf("patch %s: want 400 naming %s, got %d %s", body, field, r.status, r.body)
		}
	}
	// The prefix is the root now: a file put through the API lands under it.
	if r := e.do("alice", "PUT", "/v1/systems/bkt/content/f.txt", "x"); r.status != 201 {
		t.Fatalf("put under prefix: %d %s\n%s", r.status, r.body, e.log.String())
	}
	if !e.exists("sub/dir/f.txt") {
		t.Fatal("the object is not under the system's prefix")
	}
}

func TestS3Credential(t *testing.T) {
	e := newS3Env(t)
	r := e.do("alice", "GET", "/v1/systems/bkt/credential", nil)
	m := r.json(t)
	if r.status != 200 || m["kind"] != "s3" || m["access_key_id"] != e.gw.AccessKeyID || m["secret_access_key"] != nil {
		t.Fatalf("GET credential: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/bkt/credential/check", nil); r.status != 200 || r.json(t)["ok"] != true {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	// SSH fields are refused for an S3 credential.
	if r := e.do("alice", "PUT", "/v1/systems/bkt/credential", map[string]any{"username": "u", "private_key": "k"}); r.status != 400 || problemField(t, r) != "username" {
		t.Fatalf("ssh credential on s3: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PUT", "/v1/systems/bkt/credential", map[string]any{"access_key_id": "AK"}); r.status != 400 || problemField(t, r) != "access_key_id" {
		t.Fatalf("short key id: %d %s", r.status, r.body)
	}
	// Wrong keys: 502 naming the credential, on the check and on a file route.
	wrong := "wrong-secret-" + hex.EncodeToString([]byte("0123456789"))
	e.registerS3("alice", "badkeys", e.bucket, e.gw.AccessKeyID, wrong)
	for _, req := range [][2]string{{"POST", "/v1/systems/badkeys/credential/check"}, {"GET", "/v1/systems/badkeys/ls/"}} {
		if r := e.do("alice", req[0], req[1], nil); r.status != 502 || problemField(t, r) != "credential" {
			t.Fatalf("%s with wrong keys: want 502 naming the credential, got %d %s", req[1], r.status, r.body)
		}
	}
	// A missing bucket: 404 naming the bucket.
	e.registerS3("alice", "nobucket", "no-such-bucket-here", e.gw.AccessKeyID, e.gw.SecretAccessKey)
	for _, req := range [][2]string{{"POST", "/v1/systems/nobucket/credential/check"}, {"GET", "/v1/systems/nobucket/ls/"}} {
		if r := e.do("alice", req[0], req[1], nil); r.status != 404 || problemField(t, r) != "bucket" {
			t.Fatalf("%s on a missing bucket: want 404 naming the bucket, got %d %s", req[1], r.status, r.body)
		}
	}
	// An endpoint nobody listens on: 503.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "dead", "kind": "s3", "endpoint": dead, "bucket": e.bucket, "path_style": true}); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e.do("alice", "PUT", "/v1/systems/dead/credential", map[string]any{"access_key_id": "AKIDEAD", "secret_access_key": "x"})
	if r := e.do("alice", "POST", "/v1/systems/dead/credential/check", nil); r.status != 503 {
		t.Fatalf("unreachable endpoint: want 503, got %d %s", r.status, r.body)
	}
	// The secret keys never appear in a response, the audit or the log.
	audit := e.do("alice", "GET", "/v1/audit?limit=1000", nil)
	if audit.status != 200 || !bytes.Contains(audit.body, []byte("credential.put")) {
		t.Fatalf("audit: %d %s", audit.status, audit.body)
	}
	for _, s := range []string{e.gw.SecretAccessKey, wrong} {
		if strings.Contains(e.seen.String(), s) || strings.Contains(e.log.String(), s) {
			t.Fatalf("a secret access key leaked into a response or the log")
		}
	}
}

func TestS3FileRoutes(t *testing.T) {
	e := newS3Env(t)
	// Small upload, stat, download, Range, ETag.
	if r := e.do("alice", "PUT", "/v1/systems/bkt/content/docs/hello.txt", "hello, bucket"); r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PUT", "/v1/systems/bkt/content/docs/hello.txt", "again"); r.status != 409 {
		t.Fatalf("put without overwrite over an object: want 409, got %d %s", r.status, r.body)
	}
	r := e.do("alice", "GET", "/v1/systems/bkt/stat/docs/hello.txt", nil)
	if r.status != 200 || r.json(t)["type"] != "file" || r.json(t)["size"] != float64(13) {
		t.Fatalf("stat: %d %s", r.status, r.body)
	}
	r = e.do("alice", "GET", "/v1/systems/bkt/content/docs/hello.txt", nil)
	etag := r.header.Get("ETag")
	if r.status != 200 || string(r.body) != "hello, bucket" || etag == "" {
		t.Fatalf("get: %d %q etag %q", r.status, r.body, etag)
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/content/docs/hello.txt", nil, "Range", "bytes=7-12"); r.status != 206 || string(r.body) != "bucket" {
		t.Fatalf("range: %d %q", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/content/docs/hello.txt", nil, "If-None-Match", etag); r.status != 304 {
		t.Fatalf("if-none-match: %d", r.status)
	}
	// Dot segments stay inside the bucket: for the owner "/../../docs" is "/docs".
	if r := e.do("alice", "GET", "/v1/systems/bkt/content/../../docs/hello.txt", nil); r.status != 200 || string(r.body) != "hello, bucket" {
		t.Fatalf("dot segments: %d %q", r.status, r.body)
	}
	// checksum: sha256 computed while streaming; other algorithms refused.
	sum := sha256.Sum256([]byte("hello, bucket"))
	if r := e.do("alice", "GET", "/v1/systems/bkt/checksum/docs/hello.txt?algorithm=sha256", nil); r.status != 200 || r.json(t)["checksum"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("checksum: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/checksum/docs/hello.txt?algorithm=md5", nil); r.status != 400 || problemField(t, r) != "algorithm" {
		t.Fatalf("md5: %d %s", r.status, r.body)
	}
	// head and tail: bytes and lines, from one ranged read.
	e.putObject("docs/lines.txt", "one\ntwo\nthree\nfour\n")
	for _, tc := range []struct{ path, want string }{
		{"head/docs/lines.txt?lines=2", "one\ntwo\n"},
		{"tail/docs/lines.txt?lines=2", "three\nfour\n"},
		{"head/docs/lines.txt?bytes=5", "one\nt"},
		{"tail/docs/lines.txt?bytes=5", "four\n"},
		{"head/docs/lines.txt", "one\ntwo\nthree\nfour\n"},
	} {
		r := e.do("alice", "GET", "/v1/systems/bkt/"+tc.path, nil)
		if r.status != 200 || r.json(t)["content"] != tc.want || r.json(t)["size"] != float64(19) {
			t.Errorf("%s: %d %s", tc.path, r.status, r.body)
		}
	}
	// mkdir makes a marker; the directory lists, empty.
	if r := e.do("alice", "POST", "/v1/systems/bkt/ops/mkdir", map[string]any{"path": "/empty"}); r.status != 200 || r.json(t)["marker"] != "/empty/" {
		t.Fatalf("mkdir: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/ls/empty", nil); r.status != 200 || r.json(t)["total"] != float64(0) {
		t.Fatalf("ls empty: %d %s", r.status, r.body)
	}
	r = e.do("alice", "GET", "/v1/systems/bkt/ls/", nil)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"name":"docs","path":"/docs","type":"dir"`)) || !bytes.Contains(r.body, []byte(`"name":"empty"`)) {
		t.Fatalf("ls root: %d %s", r.status, r.body)
	}
	// copy and move (server side; a move says it is not atomic).
	if r := e.do("alice", "POST", "/v1/systems/bkt/ops/copy", map[string]any{"source": "/docs/hello.txt", "destination": "/docs/copy.txt"}); r.status != 200 {
		t.Fatalf("copy: %d %s", r.status, r.body)
	}
	r = e.do("alice", "POST", "/v1/systems/bkt/ops/move", map[string]any{"source": "/docs/copy.txt", "destination": "/moved/m.txt"})
	if r.status != 200 || r.json(t)["atomic"] != false {
		t.Fatalf("move: %d %s", r.status, r.body)
	}
	if e.exists("docs/copy.txt") || !e.exists("moved/m.txt") || !e.exists("docs/hello.txt") {
		t.Fatal("copy/move left the wrong keys")
	}
	if r := e.do("alice", "POST", "/v1/systems/bkt/ops/move", map[string]any{"source": "/docs", "destination": "/docs2"}); r.status != 409 || r.json(t)["capability"] != "directories" {
		t.Fatalf("move of a prefix: %d %s", r.status, r.body)
	}
	// Archive of a prefix.
	e.putObject("tree/a.txt", "A")
	e.putObject("tree/sub/b.txt", "BB")
	r = e.do("alice", "GET", "/v1/systems/bkt/content/tree?archive=tar", nil)
	if r.status != 200 {
		t.Fatalf("archive: %d %s", r.status, r.body)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(r.body))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	if got["tree/a.txt"] != "A" || got["tree/sub/b.txt"] != "BB" || len(got) != 4 {
		t.Fatalf("archive entries: %v", got)
	}
	r = e.do("alice", "GET", "/v1/systems/bkt/content/tree?archive=zip", nil)
	zr, err := zip.NewReader(bytes.NewReader(r.body), int64(len(r.body)))
	if r.status != 200 || err != nil {
		t.Fatalf("zip archive: %d %v", r.status, err)
	}
	zipped := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		zipped[f.Name] = string(b)
	}
	if zipped["tree/a.txt"] != "A" || zipped["tree/sub/b.txt"] != "BB" {
		t.Fatalf("zip entries: %v", zipped)
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/content/a%00b", nil); r.status != 400 || problemField(t, r) != "path" {
		t.Fatalf("NUL in a key: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/bkt/ops/mkdir", map[string]any{"path": "/a\u0000b"}); r.status != 400 {
		t.Fatalf("NUL in a body path: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/content/tree", nil); r.status != 409 {
		t.Fatalf("directory without archive: %d", r.status)
	}
	// Recursive delete.
	if r := e.do("alice", "DELETE", "/v1/systems/bkt/files/tree", nil); r.status != 409 {
		t.Fatalf("non-recursive delete of a prefix: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "DELETE", "/v1/systems/bkt/files/tree?recursive=true", nil); r.status != 204 {
		t.Fatalf("recursive delete: %d %s", r.status, r.body)
	}
	if e.exists("tree/a.txt") || e.exists("tree/sub/b.txt") {
		t.Fatal("recursive delete left keys")
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/stat/tree", nil); r.status != 404 {
		t.Fatalf("stat after delete: %d", r.status)
	}
	// What a bucket cannot do: 409 naming the capability.
	for _, tc := range []struct {
		method, path string
		body         any
		capability   string
	}{
		{"POST", "/v1/systems/bkt/ops/chmod", map[string]any{"path": "/docs/hello.txt", "mode": "0600"}, "modes"},
		{"POST", "/v1/systems/bkt/ops/symlink", map[string]any{"target": "hello.txt", "link": "/docs/l"}, "symlinks"},
		{"POST", "/v1/systems/bkt/ops/extract", map[string]any{"archive": "/docs/a.tar", "destination": "/docs"}, "commands"},
		{"POST", "/v1/systems/bkt/commands", map[string]any{"command": "true"}, "commands"},
		{"GET", "/v1/systems/bkt/filetype/docs/hello.txt", nil, "commands"},
		{"GET", "/v1/systems/bkt/df/", nil, "commands"},
		{"PUT", "/v1/systems/bkt/content/docs/m.txt?mode=0600", "x", "modes"},
	} {
		r := e.do("alice", tc.method, tc.path, tc.body)
		if r.status != 409 || r.json(t)["capability"] != tc.capability {
			t.Errorf("%s %s: want 409 naming %s, got %d %s", tc.method, tc.path, tc.capability, r.status, r.body)
		}
	}
	// Resumable uploads write SFTP part files: a bucket refuses them by name (PUT is the way).
	meta := "path " + base64.StdEncoding.EncodeToString([]byte("/docs/r.bin"))
	if r := e.do("alice", "POST", "/v1/systems/bkt/uploads", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "3", "Upload-Metadata", meta); r.status != 409 || r.json(t)["capability"] != "resumable_uploads" {
		t.Errorf("tus create on a bucket: want 409 naming resumable_uploads, got %d %s", r.status, r.body)
	}
}

func TestS3ListPaging(t *testing.T) {
	e := newS3Env(t)
	const n = 2500
	// versitygw's posix backend keeps objects as plain files: the keys are made on disk (fast),
	// and listed through the server.
	dir := filepath.Join(e.gw.Dir, e.bucket, "many")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.putObject("many/sub/inner", "y") // a common prefix among the keys
	seen := map[string]int{}
	cursor, pages := "", 0
	for {
		r := e.do("alice", "GET", "/v1/systems/bkt/ls/many?limit=300&cursor="+url.QueryEscape(cursor), nil)
		if r.status != 200 {
			t.Fatalf("page %d: %d %s", pages, r.status, r.body)
		}
		m := r.json(t)
		entries, _ := m["entries"].([]any)
		if len(entries) > 300 {
			t.Fatalf("page %d has %d entries, more than the limit", pages, len(entries))
		}
		for _, x := range entries {
			seen[x.(map[string]any)["name"].(string)]++
		}
		pages++
		next, _ := m["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != n+1 || seen["sub"] != 1 || seen["f00000"] != 1 || seen["f02499"] != 1 {
		t.Fatalf("saw %d distinct entries in %d pages, want %d", len(seen), pages, n+1)
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("%s listed %d times", k, c)
		}
	}
	if pages < n/300 {
		t.Fatalf("only %d pages", pages)
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/ls/many?offset=10", nil); r.status != 400 || problemField(t, r) != "offset" {
		t.Fatalf("offset on s3: %d %s", r.status, r.body)
	}
}

func TestS3MultipartUpload(t *testing.T) {
	e := newS3Env(t)
	body := make([]byte, 12<<20+12345) // three parts of 5 MiB
	_, _ = rand.Read(body)
	sum := sha256.Sum256(body)
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64)

	r := e.do("alice", "PUT", "/v1/systems/bkt/content/big.bin", string(body), "X-Checksum-Sha256", bad)
	if r.status != 422 {
		t.Fatalf("checksum mismatch: want 422, got %d %s", r.status, r.body)
	}
	if e.exists("big.bin") || e.uploadsLeft() != 0 {
		t.Fatalf("a failed upload left something: object %v, %d multipart uploads", e.exists("big.bin"), e.uploadsLeft())
	}
	r = e.do("alice", "PUT", "/v1/systems/bkt/content/big.bin", string(body), "X-Checksum-Sha256", good)
	if r.status != 201 || r.json(t)["sha256"] != good || r.json(t)["size"] != float64(len(body)) {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r = e.do("alice", "GET", "/v1/systems/bkt/content/big.bin", nil)
	if r.status != 200 || !bytes.Equal(r.body, body) {
		t.Fatalf("download: %d, %d bytes", r.status, len(r.body))
	}
	if r := e.do("alice", "GET", "/v1/systems/bkt/content/big.bin", nil, "Range", "bytes=10485760-10485769"); r.status != 206 || !bytes.Equal(r.body, body[10<<20:10<<20+10]) {
		t.Fatalf("range in the third part: %d", r.status)
	}
	if e.uploadsLeft() != 0 {
		t.Fatal("a completed upload left a multipart upload")
	}

	// A client that goes away mid-body leaves nothing.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("PUT", e.url+"/v1/systems/bkt/content/cut.bin", pr)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	req.ContentLength = int64(len(body))
	done := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	if _, err := pw.Write(body[:8<<20]); err != nil { // more than one part
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let the first part reach the server
	pw.CloseWithError(errors.New("client gone"))
	<-done
	deadline := time.Now().Add(10 * time.Second)
	for e.uploadsLeft() != 0 || e.exists("cut.bin") {
		if time.Now().After(deadline) {
			t.Fatalf("a cancelled upload left %d multipart uploads (object: %v)", e.uploadsLeft(), e.exists("cut.bin"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestS3Sharing(t *testing.T) {
	e := newS3Env(t)
	e.putObject("proj/shared/data.txt", "shared data")
	e.putObject("proj/secret/data.txt", "secret data")
	for _, g := range []map[string]any{
		{"principal": "user:bob", "path": "/proj/shared", "access": "read"},
		{"principal": "user:carol", "path": "/proj/shared", "access": "write"},
	} {
		if r := e.do("alice", "POST", "/v1/systems/bkt/grants", g); r.status != 201 {
			t.Fatalf("grant: %d %s", r.status, r.body)
		}
	}
	sys := "/v1/systems/alice:bkt"
	for _, tc := range []struct {
		user, method, path string
		body               any
		want               int
	}{
		{"bob", "GET", "/content/proj/shared/data.txt", nil, 200},
		{"bob", "GET", "/ls/proj/shared", nil, 200},
		{"bob", "PUT", "/content/proj/shared/new.txt", "x", 403},
		{"bob", "GET", "/content/proj/secret/data.txt", nil, 403},
		{"bob", "GET", "/content/proj/shared/../secret/data.txt", nil, 403},
		{"bob", "GET", "/content/proj/shared/%2E%2E/secret/data.txt", nil, 403},
		{"carol", "PUT", "/content/proj/shared/new.txt", "carol's", 201},
		{"carol", "PUT", "/content/proj/secret/new.txt", "x", 403},
		{"carol", "PUT", "/content/proj/shared/../secret/new.txt", "x", 403},
		{"carol", "POST", "/ops/move", map[string]any{"source": "/proj/shared/new.txt", "destination": "/proj/secret/new.txt"}, 403},
		{"carol", "DELETE", "/files/proj?recursive=true", nil, 403},
		{"carol", "POST", "/commands", map[string]any{"command": "true"}, 403},
		{"dave", "GET", "/content/proj/shared/data.txt", nil, 404},
	} {
		r := e.do(tc.user, tc.method, sys+tc.path, tc.body)
		if r.status != tc.want {
			t.Errorf("%s %s %s: want %d, got %d %s", tc.user, tc.method, tc.path, tc.want, r.status, r.body)
		}
	}
	if !e.exists("proj/shared/new.txt") || e.exists("proj/secret/new.txt") || !e.exists("proj/secret/data.txt") {
		t.Fatal("grantees' writes landed in the wrong place")
	}
	// A link downloads without a token of its own.
	r := e.do("alice", "POST", "/v1/systems/bkt/links", map[string]any{"path": "/proj/shared/data.txt", "access": "read", "expires_in_s": 600})
	if r.status != 201 {
		t.Fatalf("link: %d %s", r.status, r.body)
	}
	u, _ := url.Parse(r.json(t)["url"].(string))
	if r := e.do("", "GET", u.Path, nil); r.status != 200 || string(r.body) != "shared data" {
		t.Fatalf("link download: %d %q", r.status, r.body)
	}
}

// TestS3GrantGuard: grantees' operations on an S3 system are ordered by the owner's guard like
// on an SSH system: while bob's archive of the shared prefix streams (stalled reader), carol's
// move inside it (a restructuring) is refused with 503 instead of running mid-walk.
func TestS3GrantGuard(t *testing.T) {
	e := newS3Env(t)
	big := make([]byte, 32<<20)
	if _, err := e.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &e.bucket, Key: aws.String("proj/shared/aaa"), Body: bytes.NewReader(big)}); err != nil {
		t.Fatal(err)
	}
	e.putObject("proj/shared/zzz/inside.txt", "inside")
	for _, g := range []map[string]any{
		{"principal": "user:bob", "path": "/proj/shared", "access": "read"},
		{"principal": "user:carol", "path": "/proj/shared", "access": "write"},
	} {
		if r := e.do("alice", "POST", "/v1/systems/bkt/grants", g); r.status != 201 {
			t.Fatalf("grant: %d %s", r.status, r.body)
		}
	}
	req, _ := http.NewRequest("GET", e.url+"/v1/systems/alice:bkt/content/proj/shared?archive=tar", nil)
	req.Header.Set("Authorization", "Bearer "+e.token("bob"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("archive: %d", res.StatusCode)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 256<<10)); err != nil {
		t.Fatal(err)
	}
	r := e.do("carol", "POST", "/v1/systems/alice:bkt/ops/move", map[string]any{"source": "/proj/shared/zzz/inside.txt", "destination": "/proj/shared/moved.txt"})
	if r.status != 503 {
		t.Fatalf("a move during a grantee's walk answered %d, want 503 (refused by the guard): %s", r.status, r.body)
	}
	rest, err := io.ReadAll(res.Body)
	if err != nil || !bytes.Contains(rest, []byte("inside")) {
		t.Fatalf("archive after the refused move: %v", err)
	}
	// The walk over, the move runs.
	if r := e.do("carol", "POST", "/v1/systems/alice:bkt/ops/move", map[string]any{"source": "/proj/shared/zzz/inside.txt", "destination": "/proj/shared/moved.txt"}); r.status != 200 {
		t.Fatalf("move after the walk: %d %s", r.status, r.body)
	}
}

// TestS3TransferFailsCleanly: until the transfer engine moves data through storage.Backend, a
// TestS3TransfersThroughAPI moves a tree from an SSH system into alice's bucket and back through
// POST /v1/transfers, each verified by SHA-256, and checks the bytes on both ends and that no
// multipart upload is left.
func TestS3TransfersThroughAPI(t *testing.T) {
	var eng *transfer.Engine
	e := newS3EnvWith(t, withTransferEngine(t, transfer.Config{PollInterval: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond}, &eng))
	e.register("alice", "hpc")
	src := e.srv.MkTemp(t)
	big := make([]byte, 11<<20+123) // three parts of 5 MiB at least, the last short
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"run/big.bin": big, "run/sub/a.txt": []byte("alpha\n"), "run/empty": nil}
	for name, b := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, src, e.srv.User)
	run := func(body map[string]any) map[string]any {
		t.Helper()
		body["recursive"], body["verify"] = true, "sha256"
		r := e.do("alice", "POST", "/v1/transfers", body)
		if r.status != 202 {
			t.Fatalf("create transfer: %d %s", r.status, r.body)
		}
		m := e.waitTransfer("alice", r.json(t)["id"].(string), 2*time.Minute)
		if m["status"] != "succeeded" {
			t.Fatalf("transfer: %v", m)
		}
		return m
	}
	run(map[string]any{"source": map[string]any{"system": "hpc", "path": src + "/run"}, "destination": map[string]any{"system": "bkt", "path": "/proj/run"}})
	for name, want := range files {
		key := "proj/" + name
		out, err := e.client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &e.bucket, Key: &key})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s in the bucket: %d bytes, want %d (%v)", key, len(got), len(want), err)
		}
	}
	back := e.srv.MkTemp(t)
	run(map[string]any{"source": map[string]any{"system": "bkt", "path": "/proj/run"}, "destination": map[string]any{"system": "hpc", "path": back + "/run"}})
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(back, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s back on the host: %d bytes, want %d (%v)", name, len(got), len(want), err)
		}
	}
	if n := e.uploadsLeft(); n != 0 {
		t.Fatalf("%d incomplete multipart uploads left", n)
	}
}

// TestS3ServerSideCopyThroughAPI: a transfer between two buckets of one server reached with one
// credential, submitted through the API, is copied on the server (storage.CrossCopier through
// the access layer's per-owner wrapper): the source, uploaded through the API and so stored with
// its full-object SHA-256, is never read by sshapi (bytes_read 0), and the copy is verified.
func TestS3ServerSideCopyThroughAPI(t *testing.T) {
	var eng *transfer.Engine
	e := newS3EnvWith(t, withTransferEngine(t, transfer.Config{PollInterval: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond}, &eng))
	other := e.gw.Bucket(t)
	e.registerS3("alice", "bkt2", other, e.gw.AccessKeyID, e.gw.SecretAccessKey)
	body := make([]byte, 1<<20+7)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	if r := e.do("alice", "PUT", "/v1/systems/bkt/content/proj/run/x.bin?parents=true", string(body)); r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	r := e.do("alice", "POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": "bkt", "path": "/proj/run"},
		"destination": map[string]any{"system": "bkt2", "path": "/copy"}, "recursive": true, "verify": "sha256"})
	if r.status != 202 {
		t.Fatalf("create transfer: %d %s", r.status, r.body)
	}
	m := e.waitTransfer("alice", r.json(t)["id"].(string), time.Minute)
	if m["status"] != "succeeded" || m["bytes_done"] != float64(len(body)) {
		t.Fatalf("transfer: %v", m)
	}
	if m["bytes_read"] != float64(0) {
		t.Fatalf("sshapi read %v bytes of the source; a copy on the server reads none", m["bytes_read"])
	}
	key := "copy/x.bin"
	out, err := e.client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &other, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the copy: %d bytes, want %d (%v)", len(got), len(body), err)
	}
}
