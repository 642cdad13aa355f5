package api

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
)

// Principals of the access matrix.
const (
	pOwner = iota
	pGrantRead
	pGrantWrite
	pGroup
	pOther
	pNone
	pLinkRead
	pLinkWrite
	pExpired
	pRevoked
)

// Path kinds of the access matrix: inside the grant, its parent, a sibling, a ".." escape and a
// symlink escape (a symlink inside the grant pointing at the sibling).
var pathKinds = []string{"inside", "parent", "sibling", "dotdot", "symlink"}

var matrixOps = []string{"ls", "stat", "download", "upload", "mkdir", "move", "delete", "checksum", "transfer-src", "transfer-dst", "command"}

type principalCase struct {
	name   string
	kind   int
	user   string
	groups []string
	token  string // link token
}

// sharingFixture is one env with alice's system, a tree shared with bob (read), carol (write),
// group proj42 (read), an expired grant for frank and two live links and a revoked one.
type sharingFixture struct {
	e                  *env
	shared, proj, sec  string // local directories: the grant, its parent, the sibling
	out, in            string // transfer destinations and sources on the principals' own systems
	linkRead, linkWrit string
	linkReadID         string
	revoked            string
}

func newSharingFixture(t *testing.T) *sharingFixture {
	e, _ := newTransferEnv(t)
	e.register("alice", "hpc")
	root := e.srv.MkTemp(t)
	f := &sharingFixture{e: e, proj: filepath.Join(root, "proj"), out: e.srv.MkTemp(t), in: e.srv.MkTemp(t)}
	f.shared, f.sec = filepath.Join(f.proj, "shared"), filepath.Join(f.proj, "secret")
	for _, d := range []string{f.shared, f.sec} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{f.shared, f.proj, f.sec} {
		_ = os.WriteFile(filepath.Join(d, "data.txt"), []byte("data in "+filepath.Base(d)+"\n"), 0o644)
	}
	_ = os.WriteFile(filepath.Join(f.shared, "linkw.txt"), []byte("before\n"), 0o644)
	_ = os.WriteFile(filepath.Join(f.in, "src.txt"), []byte("from the principal's own system\n"), 0o644)
	if err := os.Symlink(f.sec, filepath.Join(f.shared, "escape")); err != nil {
		t.Fatal(err)
	}
	ownTree(t, e.srv, root)
	for _, u := range []string{"bob", "carol", "dave", "eve", "frank"} {
		e.register(u, "own")
	}
	for _, g := range []map[string]any{
		{"principal": "user:bob", "path": f.shared, "access": "read"},
		{"principal": "user:carol", "path": f.shared, "access": "write"},
		{"principal": "group:proj42", "path": f.shared, "access": "read"},
	} {
		if r := e.do("alice", "POST", "/v1/systems/hpc/grants", g); r.status != 201 {
			t.Fatalf("grant %v: %d %s", g, r.status, r.body)
		}
	}
	// An expired grant cannot be made through the API (expires_at must be in the future).
	if err := e.api.deps.Store.CreateGrant(t.Context(), &store.GrantCreateParams{Grant: &store.Grant{Owner: "alice", SystemID: "hpc",
		Principal: "user:frank", Path: f.shared, Access: "write", ExpiresAt: time.Now().Add(-time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	mk := func(p, access string) (string, string) {
		r := e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": p, "access": access, "expires_in_s": 3600})
		if r.status != 201 {
			t.Fatalf("link: %d %s", r.status, r.body)
		}
		u, _ := url.Parse(r.json(t)["url"].(string))
		return strings.TrimPrefix(u.Path, "/v1/links/"), r.json(t)["id"].(string)
	}
	f.linkRead, f.linkReadID = mk(filepath.Join(f.shared, "data.txt"), "read")
	f.linkWrit, _ = mk(filepath.Join(f.shared, "linkw.txt"), "write")
	var revokedID string
	f.revoked, revokedID = mk(filepath.Join(f.shared, "data.txt"), "read")
	if r := e.do("alice", "DELETE", "/v1/systems/hpc/links/"+revokedID, nil); r.status != 204 {
		t.Fatalf("revoke link: %d %s", r.status, r.body)
	}
	return f
}

func (f *sharingFixture) principals() []principalCase {
	return []principalCase{
		{"owner", pOwner, "alice", nil, ""},
		{"grantee-read", pGrantRead, "bob", nil, ""},
		{"grantee-write", pGrantWrite, "carol", nil, ""},
		{"group-member", pGroup, "dave", []string{"proj42"}, ""},
		{"other-user", pOther, "eve", nil, ""},
		{"no-token", pNone, "", nil, ""},
		{"link-read", pLinkRead, "", nil, f.linkRead},
		{"link-write", pLinkWrite, "", nil, f.linkWrit},
		{"expired-grant", pExpired, "frank", nil, ""},
		{"revoked-link", pRevoked, "", nil, f.revoked},
	}
}

// dirOf is the remote directory a path kind names (as the caller writes it); localOf where it
// really is.
func (f *sharingFixture) dirOf(kind string) string {
	switch kind {
	case "inside":
		return f.shared
	case "parent":
		return f.proj
	case "sibling":
		return f.sec
	case "dotdot":
		return f.shared + "/../secret"
	}
	return f.shared + "/escape"
}

func (f *sharingFixture) localOf(kind string) string {
	switch kind {
	case "inside":
		return f.shared
	case "parent":
		return f.proj
	}
	return f.sec
}

// expectation is a cell's expected HTTP status and, for an accepted transfer, its end state.
type expectation struct {
	status int
	final  string
}

func expect(p principalCase, op, kind string) expectation {
	reads := map[string]bool{"ls": true, "stat": true, "download": true, "checksum": true, "transfer-src": true}
	okStatus := map[string]int{"ls": 200, "stat": 200, "download": 200, "upload": 201, "mkdir": 200, "move": 200, "delete": 204,
		"checksum": 200, "transfer-src": 202, "transfer-dst": 202, "command": 200}
	allowed := func() expectation {
		if strings.HasPrefix(op, "transfer") {
			return expectation{202, "succeeded"}
		}
		return expectation{status: okStatus[op]}
	}
	switch p.kind {
	case pOwner:
		return allowed()
	case pOther, pExpired:
		return expectation{status: 404}
	case pNone:
		return expectation{status: 401}
	case pLinkRead, pLinkWrite, pRevoked:
		switch {
		case op != "download" && op != "upload":
			return expectation{status: 401} // a link token is not a bearer token
		case p.kind == pRevoked || kind != "inside":
			return expectation{status: 404}
		case op == "upload" && p.kind == pLinkRead:
			return expectation{status: 403}
		}
		return allowed()
	}
	canWrite := p.kind == pGrantWrite
	switch {
	case op == "command":
		return expectation{status: 403} // commands are never granted
	case kind == "parent" || kind == "sibling" || kind == "dotdot":
		return expectation{status: 403}
	case !reads[op] && !canWrite:
		return expectation{status: 403}
	case kind == "symlink" && strings.HasPrefix(op, "transfer"):
		return expectation{202, "failed"} // judged lexically at submit, refused by confinement when run
	case kind == "symlink":
		return expectation{status: 403}
	}
	return allowed()
}

// cellRequest performs one cell and returns its status and, for transfers, the transfer id.
func (f *sharingFixture) cellRequest(t *testing.T, p principalCase, op, kind, reqID string) (int, string) {
	e := f.e
	ref, own := "alice:hpc", "own"
	if p.kind == pOwner {
		ref, own = "hpc", "hpc"
	}
	slug := p.name + "-" + kind
	dir := f.dirOf(kind)
	hdr := []string{"X-Request-Id", reqID}
	user := p.user
	switch {
	case p.token != "":
		hdr = append(hdr, "Authorization", "Bearer "+p.token)
		user = ""
	case len(p.groups) > 0:
		tok, err := auth.IssueHS256Groups(e.secret, p.user, "groups", p.groups, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		hdr = append(hdr, "Authorization", "Bearer "+tok)
		user = ""
	}
	if p.token != "" && (op == "download" || op == "upload") {
		u := "/v1/links/" + p.token
		if kind != "inside" {
			u += "/../" + kind // leaving the link's path is no route at all
		}
		hdr = hdr[:2]
		if op == "download" {
			return e.do("", "GET", u, nil, hdr...).status, ""
		}
		return e.do("", "PUT", u+"?overwrite=true", "uploaded through a link\n", hdr...).status, ""
	}
	sys := "/v1/systems/" + ref
	var r resp
	switch op {
	case "ls":
		r = e.do(user, "GET", sys+"/ls"+dir, nil, hdr...)
	case "stat":
		r = e.do(user, "GET", sys+"/stat"+dir+"/data.txt", nil, hdr...)
	case "download":
		r = e.do(user, "GET", sys+"/content"+dir+"/data.txt", nil, hdr...)
	case "checksum":
		r = e.do(user, "GET", sys+"/checksum"+dir+"/data.txt", nil, hdr...)
	case "upload":
		r = e.do(user, "PUT", sys+"/content"+dir+"/up-"+slug+".txt", "uploaded\n", hdr...)
	case "mkdir":
		r = e.do(user, "POST", sys+"/ops/mkdir", map[string]any{"path": dir + "/mk-" + slug}, hdr...)
	case "move":
		r = e.do(user, "POST", sys+"/ops/move", map[string]any{"source": dir + "/mv-" + slug + ".txt", "destination": dir + "/mv-" + slug + ".moved"}, hdr...)
	case "delete":
		r = e.do(user, "DELETE", sys+"/files"+dir+"/del-"+slug+".txt", nil, hdr...)
	case "command":
		r = e.do(user, "POST", sys+"/commands", map[string]any{"command": "true"}, hdr...)
	case "transfer-src":
		r = e.do(user, "POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": ref, "path": dir + "/data.txt"},
			"destination": map[string]any{"system": own, "path": filepath.Join(f.out, slug+".txt")}}, hdr...)
	case "transfer-dst":
		r = e.do(user, "POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": own, "path": filepath.Join(f.in, "src.txt")},
			"destination": map[string]any{"system": ref, "path": dir + "/td-" + slug + ".txt"}}, hdr...)
	}
	id := ""
	if r.status == 202 {
		id, _ = r.json(t)["id"].(string)
	}
	return r.status, id
}

// checkEffect asserts a cell's effect on the remote tree: done when allowed, absent when refused.
func (f *sharingFixture) checkEffect(t *testing.T, p principalCase, op, kind string, allowed bool) {
	slug := p.name + "-" + kind
	local := f.localOf(kind)
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	var done bool
	switch op {
	case "upload":
		if p.token != "" {
			b, _ := os.ReadFile(filepath.Join(f.shared, "linkw.txt"))
			done = string(b) == "uploaded through a link\n"
			if p.kind == pLinkRead || p.kind == pRevoked || kind != "inside" {
				return // the write link's file is checked on its own cell
			}
		} else {
			done = exists(filepath.Join(local, "up-"+slug+".txt"))
		}
	case "mkdir":
		done = exists(filepath.Join(local, "mk-"+slug))
	case "move":
		done = exists(filepath.Join(local, "mv-"+slug+".moved")) && !exists(filepath.Join(local, "mv-"+slug+".txt"))
	case "delete":
		done = !exists(filepath.Join(local, "del-"+slug+".txt"))
	default:
		return
	}
	if done != allowed {
		t.Errorf("%s %s %s: effect done=%v, want %v", p.name, op, kind, done, allowed)
	}
}

// TestAccessMatrix: principals × operations × paths against a real sshd, every cell asserted,
// every decided cell in the audit with the right principal and owner, and no secret anywhere.
func TestAccessMatrix(t *testing.T) {
	f := newSharingFixture(t)
	e := f.e
	principals := f.principals()
	for _, p := range principals {
		for _, kind := range pathKinds {
			slug := p.name + "-" + kind
			_ = os.WriteFile(filepath.Join(f.localOf(kind), "mv-"+slug+".txt"), []byte("m\n"), 0o644)
			_ = os.WriteFile(filepath.Join(f.localOf(kind), "del-"+slug+".txt"), []byte("d\n"), 0o644)
		}
	}
	ownTree(t, e.srv, f.proj)
	seenBefore := len(e.seen.String()) // link URLs were shown once, at creation
	type pendingTransfer struct {
		cell, id, user, token string
		groups                []string
		want                  string
	}
	var transfers []pendingTransfer
	type cellKey struct{ principal, op, kind string }
	reqIDs := map[string]cellKey{}
	statuses := map[cellKey]int{}
	allowed, refused := 0, 0
	for _, p := range principals {
		for _, op := range matrixOps {
			for _, kind := range pathKinds {
				want := expect(p, op, kind)
				reqID := fmt.Sprintf("m%d-%s-%s", p.kind, op, kind)
				reqIDs[reqID] = cellKey{p.name, op, kind}
				got, id := f.cellRequest(t, p, op, kind, reqID)
				statuses[cellKey{p.name, op, kind}] = got
				if got != want.status {
					t.Errorf("%s %s %s: status %d, want %d", p.name, op, kind, got, want.status)
					continue
				}
				if want.final != "" {
					transfers = append(transfers, pendingTransfer{cell: p.name + " " + op + " " + kind, id: id, user: p.user, groups: p.groups, want: want.final})
				}
				ok := got < 300 && want.final != "failed"
				if ok {
					allowed++
				} else {
					refused++
				}
				f.checkEffect(t, p, op, kind, ok)
			}
		}
	}
	for _, tr := range transfers {
		m := e.waitTransfer(tr.user, tr.id, time.Minute)
		if m["status"] != tr.want {
			t.Errorf("%s: transfer %s, want %s (%v)", tr.cell, m["status"], tr.want, m["error"])
		}
	}
	t.Logf("access matrix: %d principals × %d operations × %d paths = %d cells: %d allowed, %d refused",
		len(principals), len(matrixOps), len(pathKinds), len(principals)*len(matrixOps)*len(pathKinds), allowed, refused)

	// Provenance: every decided cell (allowed, or refused on a system the caller can see) is in
	// the audit with its principal and the acting-as owner; alice sees her grantees' actions.
	e.api.access.FlushAudit(t.Context())
	byReq := map[string]store.AuditEntry{}
	for before := int64(0); ; {
		page, err := e.api.deps.Store.QueryAudit(context.Background(), &store.AuditQueryParams{Limit: 1000, BeforeSeq: before})
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range page {
			byReq[en.RequestID] = en
		}
		if len(page) < 1000 {
			break
		}
		before = page[len(page)-1].Seq
	}
	actor := map[string]string{"owner": "alice", "grantee-read": "bob", "grantee-write": "carol", "group-member": "dave",
		"link-read": "link:" + f.linkReadID}
	for reqID, c := range reqIDs {
		st := statuses[c]
		en, found := byReq[reqID]
		switch {
		case st == 401 || st == 404:
			if found && st == 401 {
				t.Errorf("%v: unauthenticated request audited: %+v", c, en)
			}
		case !found:
			t.Errorf("%v (status %d): no audit entry", c, st)
		default:
			if want := actor[c.principal]; want != "" && en.Owner != want {
				t.Errorf("%v: audit principal %q, want %q", c, en.Owner, want)
			}
			if c.principal != "link-write" && (en.SystemOwner != "alice" || en.Status != st) {
				t.Errorf("%v: audit owner %q status %d, want alice %d", c, en.SystemOwner, en.Status, st)
			}
		}
	}
	if en := byReq["m1-download-inside"]; en.Bytes != int64(len("data in shared\n")) || en.Action != "files.download" || len(en.Paths) != 1 {
		t.Errorf("bob's download audit: %+v", en)
	}
	// alice's /v1/audit shows bob's action on her system; bob's shows his own, not alice's.
	if r := e.do("alice", "GET", "/v1/audit?principal=bob&system=hpc&limit=1000", nil); !strings.Contains(string(r.body), `"principal":"bob"`) {
		t.Errorf("alice does not see bob's actions on her system: %s", r.body)
	}
	if r := e.do("bob", "GET", "/v1/audit?principal=alice&limit=1000", nil); strings.Contains(string(r.body), `"principal":"alice"`) {
		t.Errorf("bob sees alice's own actions: %s", r.body)
	}
	if r := e.do("alice", "GET", "/v1/audit?path_prefix="+url.QueryEscape(f.shared)+"&limit=2", nil, "Accept", "application/x-ndjson"); r.status != 200 ||
		strings.Count(string(r.body), "\n") != 2 || r.header.Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("NDJSON export: %d %q", r.status, r.body)
	}
	// No secret after creation: not in responses, the audit or the log.
	secrets := []string{strings.SplitN(f.linkRead, ".", 2)[1], strings.SplitN(f.linkWrit, ".", 2)[1], strings.SplitN(f.revoked, ".", 2)[1]}
	for _, line := range strings.Split(string(e.srv.PrivateKeyPEM), "\n")[1:3] {
		secrets = append(secrets, line)
	}
	audit := e.do("alice", "GET", "/v1/audit?limit=1000", nil)
	for i, s := range secrets {
		for where, text := range map[string]string{"responses": e.seen.String()[seenBefore:], "log": e.log.String(), "audit": string(audit.body)} {
			if strings.Contains(text, s) {
				t.Errorf("secret %d appears in the %s", i, where)
			}
		}
	}
}
