package api

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/transfer"
)

// operatorVerifier makes the named users operators, as auth.Config.Operators does.
type operatorVerifier struct {
	Verifier
	ops []string
}

func (v operatorVerifier) Verify(ctx context.Context, token string) (auth.Principal, error) {
	p, err := v.Verifier.Verify(ctx, token)
	p.Operator = err == nil && slices.Contains(v.ops, p.User)
	return p, err
}

// TestRevocationStopsRunningTransfer: bob copies from alice's system through a grant; alice
// revokes it while the transfer runs; the next range is refused and the transfer fails
// without leaving a file behind.
func TestRevocationStopsRunningTransfer(t *testing.T) {
	e, _ := newTransferEnv(t)
	srcDir, dstDir := e.slowSource(t, 8<<20, "bob", "own", 64<<20)
	r := e.do("alice", "POST", "/v1/systems/slow/grants", map[string]any{"principal": "user:bob", "path": srcDir, "access": "read"})
	if r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	grant := r.json(t)["id"].(string)
	r = e.do("bob", "POST", "/v1/transfers", map[string]any{
		"source": map[string]any{"system": "alice:slow", "path": filepath.Join(srcDir, "f")}, "destination": map[string]any{"system": "own", "path": filepath.Join(dstDir, "f")},
		"chunk_size": 2 << 20, "streams": 2,
	})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	deadline := time.Now().Add(time.Minute)
	for {
		m := e.do("bob", "GET", "/v1/transfers/"+id, nil).json(t)
		if m["status"] == "running" && m["bytes_done"].(float64) > 0 {
			break
		}
		if time.Now().After(deadline) || m["status"] == "succeeded" || m["status"] == "failed" {
			t.Fatalf("never running: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	revoked := time.Now()
	if r := e.do("alice", "DELETE", "/v1/systems/slow/grants/"+grant, nil); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	m := e.waitTransfer("bob", id, time.Minute)
	stopped := time.Since(revoked)
	if m["status"] != "failed" || !strings.Contains(m["error"].(string), "no longer shared") || m["bytes_done"].(float64) >= float64(64<<20) {
		t.Fatalf("after revocation: %v", m)
	}
	if entries, _ := os.ReadDir(dstDir); len(entries) != 0 {
		t.Fatalf("destination not clean: %v", entries)
	}
	t.Logf("revoked at %.0f MiB of 64; the transfer failed %v later", m["bytes_done"].(float64)/(1<<20), stopped.Round(time.Millisecond))
	// The next request is refused too.
	if r := e.do("bob", "GET", "/v1/systems/alice:slow/stat"+srcDir+"/f", nil); r.status != 404 {
		t.Fatalf("stat after revocation: %d %s", r.status, r.body)
	}
}

// TestSharingFlow: grant validation, owner-only management, the shared list, public data,
// links with Range, archives, max_uses and uploads, operators.
func TestSharingFlow(t *testing.T) {
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) {
		d.Verifier = operatorVerifier{Verifier: d.Verifier, ops: []string{"root"}}
	})
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	pub := filepath.Join(dir, "pub")
	_ = os.MkdirAll(filepath.Join(pub, "sub"), 0o755)
	_ = os.WriteFile(filepath.Join(pub, "a.txt"), []byte("0123456789"), 0o644)
	_ = os.WriteFile(filepath.Join(pub, "sub", "b.txt"), []byte("bee"), 0o644)
	ownTree(t, e.srv, dir)

	bad := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"bad principal", map[string]any{"principal": "bob", "path": pub, "access": "read"}, "principal"},
		{"owner", map[string]any{"principal": "user:alice", "path": pub, "access": "read"}, "principal"},
		{"relative path", map[string]any{"principal": "user:bob", "path": "pub", "access": "read"}, "path"},
		{"bad access", map[string]any{"principal": "user:bob", "path": pub, "access": "admin"}, "access"},
		{"past expiry", map[string]any{"principal": "user:bob", "path": pub, "access": "read", "expires_at": time.Now().Add(-time.Hour)}, "expires_at"},
	}
	for _, c := range bad {
		r := e.do("alice", "POST", "/v1/systems/hpc/grants", c.body)
		if r.status != 400 || !strings.Contains(string(r.body), `"field":"`+c.field+`"`) {
			t.Errorf("%s: %d %s", c.name, r.status, r.body)
		}
	}
	if r := e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "authenticated", "path": pub, "access": "read"}); r.status != 201 {
		t.Fatalf("public grant: %d %s", r.status, r.body)
	}
	// Only the owner manages grants and links; a grantee cannot even see them.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/systems/alice:hpc/grants"}, {"POST", "/v1/systems/alice:hpc/links"}, {"GET", "/v1/systems/alice:hpc"},
		{"PUT", "/v1/systems/alice:hpc/credential"},
	} {
		if r := e.do("bob", c.method, c.path, map[string]any{}); r.status != 404 && r.status != 400 {
			t.Errorf("bob %s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	// Public data: every signed-in user lists it and sees the system as shared.
	r := e.do("eve", "GET", "/v1/systems", nil)
	if !strings.Contains(string(r.body), `"id":"alice:hpc","owner":"alice"`) || !strings.Contains(string(r.body), `"path":"`+pub+`","access":"read","via":"authenticated"`) {
		t.Fatalf("eve's list: %s", r.body)
	}
	if r := e.do("eve", "GET", "/v1/systems/alice:hpc/ls"+pub, nil); r.status != 200 || !strings.Contains(string(r.body), "a.txt") {
		t.Fatalf("eve lists public data: %d %s", r.status, r.body)
	}
	if r := e.do("eve", "PUT", "/v1/systems/alice:hpc/content"+pub+"/x", "x"); r.status != 403 {
		t.Fatalf("eve writes public data: %d %s", r.status, r.body)
	}
	if r := e.do("eve", "GET", "/v1/systems/"+url.PathEscape("alice")+":hpc/ls/", nil); r.status != 403 {
		t.Fatalf("eve lists alice's home: %d %s", r.status, r.body)
	}

	// Links: Range, max_uses, a directory as an archive, with no Authorization header.
	r = e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": pub + "/a.txt", "access": "read", "max_uses": 2})
	if r.status != 201 || r.json(t)["max_uses"] != float64(2) || r.json(t)["uses"] != float64(0) {
		t.Fatalf("link: %d %s", r.status, r.body)
	}
	u, _ := url.Parse(r.json(t)["url"].(string))
	if r := e.do("", "GET", u.Path, nil, "Range", "bytes=2-4"); r.status != 206 || string(r.body) != "234" {
		t.Fatalf("range through a link: %d %q", r.status, r.body)
	}
	if r := e.do("", "GET", u.Path, nil); r.status != 200 || string(r.body) != "0123456789" {
		t.Fatalf("second use: %d %q", r.status, r.body)
	}
	if r := e.do("", "GET", u.Path, nil); r.status != 404 {
		t.Fatalf("third use of a 2-use link: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/hpc/links", nil); !strings.Contains(string(r.body), `"uses":2`) || strings.Contains(string(r.body), "/v1/links/") {
		t.Fatalf("link list: %s", r.body)
	}
	r = e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": pub, "access": "read"})
	u, _ = url.Parse(r.json(t)["url"].(string))
	ar := e.do("", "GET", u.Path+"?archive=tar.gz", nil)
	if ar.status != 200 {
		t.Fatalf("archive through a link: %d %s", ar.status, ar.body)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(ar.body)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "sub/b.txt") }) {
		t.Fatalf("archive members: %v", names)
	}
	// A write link uploads with no Authorization header.
	r = e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": pub + "/drop.txt", "access": "write", "expires_in_s": 60})
	u, _ = url.Parse(r.json(t)["url"].(string))
	if r := e.do("", "PUT", u.Path, "dropped"); r.status != 201 {
		t.Fatalf("upload through a link: %d %s", r.status, r.body)
	}
	if b, _ := os.ReadFile(filepath.Join(pub, "drop.txt")); string(b) != "dropped" {
		t.Fatalf("uploaded %q", b)
	}
	if r := e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": pub, "access": "read", "expires_in_s": 365 * 24 * 3600}); r.status != 400 {
		t.Fatalf("a link longer than link_max_ttl: %d %s", r.status, r.body)
	}

	// The audit pages with before=next_before, newest first, and refuses a bad filter.
	p1 := e.do("alice", "GET", "/v1/audit?limit=1", nil).json(t)
	next, ok := p1["next_before"].(float64)
	if !ok {
		t.Fatalf("first page without next_before: %v", p1)
	}
	p2 := e.do("alice", "GET", "/v1/audit?limit=1&before="+strconv.FormatInt(int64(next), 10), nil).json(t)
	e1, e2 := p1["entries"].([]any)[0].(map[string]any), p2["entries"].([]any)[0].(map[string]any)
	if e2["seq"].(float64) >= e1["seq"].(float64) {
		t.Fatalf("second page %v after %v", e2, e1)
	}
	if r := e.do("alice", "GET", "/v1/audit?since=yesterday", nil); r.status != 400 || !strings.Contains(string(r.body), `"field":"since"`) {
		t.Fatalf("bad since: %d %s", r.status, r.body)
	}

	// Operators see every user's actions, list systems and disable a system at once.
	if r := e.do("alice", "GET", "/v1/admin/audit", nil); r.status != 403 {
		t.Fatalf("non-operator admin audit: %d", r.status)
	}
	if r := e.do("root", "GET", "/v1/admin/audit?principal=eve", nil); r.status != 200 || !strings.Contains(string(r.body), `"owner":"alice"`) {
		t.Fatalf("admin audit: %d %s", r.status, r.body)
	}
	if r := e.do("root", "GET", "/v1/admin/systems", nil); !strings.Contains(string(r.body), `"owner":"alice","id":"hpc"`) {
		t.Fatalf("admin systems: %s", r.body)
	}
	if r := e.do("root", "PUT", "/v1/admin/users/alice/systems/hpc/disabled", map[string]any{"disabled": true}); r.status != 200 {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	if r := e.do("eve", "GET", "/v1/systems/alice:hpc/ls"+pub, nil); r.status != 403 {
		t.Fatalf("grantee on a disabled system: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}); r.status != 403 {
		t.Fatalf("owner on a disabled system: %d %s", r.status, r.body)
	}
	if r := e.do("root", "PUT", "/v1/admin/users/alice/disabled", map[string]any{"disabled": true}); r.status != 200 {
		t.Fatalf("disable user: %d %s", r.status, r.body)
	}
	_ = e.do("root", "PUT", "/v1/admin/users/alice/systems/hpc/disabled", map[string]any{"disabled": false})
	if r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}); r.status != 403 {
		t.Fatalf("disabled user: %d %s", r.status, r.body)
	}
	_ = e.do("root", "PUT", "/v1/admin/users/alice/disabled", map[string]any{"disabled": false})
	if r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}); r.status != 200 {
		t.Fatalf("re-enabled: %d %s", r.status, r.body)
	}
}

// TestRevocationStopsSmallFileTransfer: bob copies a directory of small files from alice's
// system through a grant; alice revokes it once the first files have arrived. Small files move
// in batches, not ranges, and the transfer must stop at its next batch, as it stops at the next
// range of a large file: it fails saying the system is no longer shared, with most files never
// copied. (Before, the round checked access once at its start and copied every file of it.)
func TestRevocationStopsSmallFileTransfer(t *testing.T) {
	e, _ := newTransferEnvWith(t, transfer.Config{PollInterval: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond,
		SharedChunkItems: 4, BatchFiles: 1})
	srcDir, dstDir := e.slowSource(t, 2<<20, "bob", "own", 0)
	const files = 48
	for i := range files {
		data := make([]byte, 128<<10)
		_, _ = rand.Read(data)
		_ = os.WriteFile(filepath.Join(srcDir, fmt.Sprintf("f%02d", i)), data, 0o644)
	}
	ownTree(t, e.srv, srcDir)
	r := e.do("alice", "POST", "/v1/systems/slow/grants", map[string]any{"principal": "user:bob", "path": srcDir, "access": "read"})
	if r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	grant := r.json(t)["id"].(string)
	dst := filepath.Join(dstDir, "copy")
	r = e.do("bob", "POST", "/v1/transfers", map[string]any{
		"source": map[string]any{"system": "alice:slow", "path": srcDir}, "destination": map[string]any{"system": "own", "path": dst},
		"recursive": true,
	})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	// copied counts the files in place under their final names (not temporary ones).
	copied := func() int {
		entries, _ := os.ReadDir(dst)
		n := 0
		for _, de := range entries {
			if !strings.HasPrefix(de.Name(), ".") {
				n++
			}
		}
		return n
	}
	awaitState(t, "the first files copied", func() bool { return copied() > 0 })
	if r := e.do("alice", "DELETE", "/v1/systems/slow/grants/"+grant, nil); r.status != 204 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	atRevoke := copied()
	m := e.waitTransfer("bob", id, time.Minute)
	after := copied()
	if m["status"] != "failed" || !strings.Contains(fmt.Sprint(m["error"]), "no longer shared") || after >= files {
		t.Fatalf("after revocation (%d files copied then): %d of %d files copied, %v", atRevoke, after, files, m)
	}
	t.Logf("revoked with %d of %d files copied; %d when the transfer failed", atRevoke, files, after)
}

// TestGroupLeftStopsRunningTransfer: dave copies from alice's system through a grant to group
// proj42; his identity provider then drops him from proj42, and his next request's token
// says so. The transfer that runs on through the group's grant is refused at its next range,
// as it would be had the grant been revoked: a running transfer judges group grants by the
// groups its owner's last request carried (recorded in the store, so on any instance), not by
// those of the request that started it. Before, it went on to the end.
func TestGroupLeftStopsRunningTransfer(t *testing.T) {
	e, _ := newTransferEnv(t)
	srcDir, dstDir := e.slowSource(t, 8<<20, "dave", "own", 64<<20)
	if r := e.do("alice", "POST", "/v1/systems/slow/grants", map[string]any{"principal": "group:proj42", "path": srcDir, "access": "read"}); r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	as := func(groups ...string) string {
		tok, err := auth.IssueHS256Groups(e.secret, "dave", "groups", groups, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	r := e.do("", "POST", "/v1/transfers", map[string]any{
		"source": map[string]any{"system": "alice:slow", "path": filepath.Join(srcDir, "f")}, "destination": map[string]any{"system": "own", "path": filepath.Join(dstDir, "f")},
		"chunk_size": 2 << 20, "streams": 2,
	}, "Authorization", as("proj42"))
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	get := func(groups ...string) map[string]any {
		return e.do("", "GET", "/v1/transfers/"+id, nil, "Authorization", as(groups...)).json(t)
	}
	awaitState(t, "the transfer running", func() bool {
		m := get("proj42")
		if m["status"] == "succeeded" || m["status"] == "failed" {
			t.Fatalf("never running: %v", m)
		}
		return m["status"] == "running" && m["bytes_done"].(float64) > 0
	})
	// dave's next request carries his new groups: proj42 is gone.
	if r := e.do("", "GET", "/v1/systems/alice:slow/stat"+srcDir+"/f", nil, "Authorization", as("other")); r.status != 404 {
		t.Fatalf("stat without the group: %d %s", r.status, r.body)
	}
	m := e.waitTransfer("dave", id, time.Minute)
	if m["status"] != "failed" || !strings.Contains(fmt.Sprint(m["error"]), "no longer shared") || m["bytes_done"].(float64) >= float64(64<<20) {
		t.Fatalf("after dave left proj42: %v", m)
	}
	t.Logf("dave left proj42; the transfer failed at %.0f MiB of 64: %v", m["bytes_done"].(float64)/(1<<20), m["error"])
}
