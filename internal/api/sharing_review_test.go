package api

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/transfer"
)

// TestLinkURLUsesConfiguredBase: a link's URL starts with http.public_url, or without it with
// the listen address, and never with the request's Host header.
func TestLinkURLUsesConfiguredBase(t *testing.T) {
	for _, tc := range []struct {
		name, public, want string
	}{
		{"public_url", "https://files.example/sshapi/", "https://files.example/sshapi/v1/links/"},
		{"listen address", "", ""}, // filled with the env's URL below
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvConfig(t, Config{PublicURL: tc.public}, nil)
			e.register("alice", "hpc")
			want := tc.want
			if want == "" {
				want = e.url + "/v1/links/"
			}
			dir := e.srv.MkTemp(t)
			r := e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": dir, "access": "read"},
				"Host", "evil.example", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "http")
			if r.status != 201 {
				t.Fatalf("link: %d %s", r.status, r.body)
			}
			u, _ := r.json(t)["url"].(string)
			if !strings.HasPrefix(u, want) || strings.Contains(u, "evil") {
				t.Fatalf("link url %q, want it under %q whatever the Host header says", u, want)
			}
		})
	}
	if err := (Config{PublicURL: "files.example/x"}).Validate(); err == nil {
		t.Fatal("a public_url without a scheme was accepted")
	}
}

// TestOutsideGrantDetail: a grantee refused for a path that leads out of what is
// shared (a symlink inside the grant pointing elsewhere) is told only that; the owner, on their
// own system with a root_dir, still sees where the path led.
func TestOutsideGrantDetail(t *testing.T) {
	f := newSharingFixture(t)
	e := f.e
	esc := filepath.Join(f.shared, "escape", "data.txt") // the symlink leads to f.sec
	for _, c := range []struct{ who, path string }{
		{"bob", "/v1/systems/alice:hpc/stat" + esc},
		{"bob", "/v1/systems/alice:hpc/content" + esc},
		{"bob", "/v1/systems/alice:hpc/ls" + filepath.Join(f.shared, "escape")},
	} {
		r := e.do(c.who, "GET", c.path, nil)
		if r.status != 403 {
			t.Fatalf("%s %s: %d %s, want 403", c.who, c.path, r.status, r.body)
		}
		if d, _ := r.json(t)["detail"].(string); strings.Contains(d, f.sec) || strings.Contains(d, f.proj) || !strings.Contains(d, "outside") {
			t.Fatalf("%s %s: detail %q names a path outside the grant", c.who, c.path, d)
		}
	}
	// The owner confined by root_dir still sees the canonical path.
	if r := e.do("alice", "PATCH", "/v1/systems/hpc", map[string]any{"root_dir": f.shared}); r.status != 200 {
		t.Fatalf("root_dir: %d %s", r.status, r.body)
	}
	r := e.do("alice", "GET", "/v1/systems/hpc/stat"+esc, nil)
	if d, _ := r.json(t)["detail"].(string); r.status != 403 || !strings.Contains(d, f.sec) {
		t.Fatalf("owner: %d %s, want 403 naming %s", r.status, r.body, f.sec)
	}
}

// routePath fills a route's pattern with the given path values.
func routePath(pattern string, vals map[string]string) string {
	p := strings.ReplaceAll(pattern, "{$}", "")
	for k, v := range vals {
		p = strings.ReplaceAll(p, "{"+k+"...}", v)
		p = strings.ReplaceAll(p, "{"+k+"}", v)
	}
	return p
}

// TestDisabledRefusesEveryRoute: with alice switched off by an operator, every authenticated
// route she calls is 403 problem+json naming the switch, management routes included (creating
// systems, grants, links, storing credentials); with one of her systems switched off, every
// route naming it is. Operators' routes keep working, even for a disabled operator. Another
// instance on the same database sees the switch within DisabledCacheTTL.
func TestDisabledRefusesEveryRoute(t *testing.T) {
	e, _ := newTransferEnv(t)
	e.api.deps.Verifier = operatorVerifier{Verifier: e.api.deps.Verifier, ops: []string{"root"}}
	e.register("alice", "hpc")
	e.register("alice", "hpc2")
	dir := e.srv.MkTemp(t)
	ownTree(t, e.srv, dir)
	_ = os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	r := e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "user:bob", "path": dir, "access": "read"})
	if r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	grant := r.json(t)["id"].(string)
	r = e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": filepath.Join(dir, "f"), "access": "read"})
	if r.status != 201 {
		t.Fatalf("link: %d %s", r.status, r.body)
	}
	link, linkURL := r.json(t)["id"].(string), r.json(t)["url"].(string)
	r = e.do("alice", "POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": "hpc", "path": filepath.Join(dir, "f")},
		"destination": map[string]any{"system": "hpc2", "path": filepath.Join(dir, "g")}})
	if r.status != 202 {
		t.Fatalf("transfer: %d %s", r.status, r.body)
	}
	xfer := r.json(t)["id"].(string)

	// A second instance on the same database, its cache warm with "enabled".
	b := New(Config{}, Deps{Store: e.api.deps.Store, Keyring: e.api.deps.Keyring, Pool: e.api.deps.Pool, Verifier: e.api.deps.Verifier})
	hs := httptest.NewServer(b.Handler())
	t.Cleanup(hs.Close)
	other := &env{t: t, url: hs.URL, secret: e.secret, seen: &syncBuffer{}, srv: e.srv, api: b}
	if r := other.do("alice", "GET", "/v1/systems/hpc", nil); r.status != 200 {
		t.Fatalf("other instance: %d %s", r.status, r.body)
	}

	refused := func(r resp, want string) bool {
		if r.status != 403 || r.header.Get("Content-Type") != "application/problem+json" {
			return false
		}
		d, _ := r.json(t)["detail"].(string)
		return strings.Contains(d, want)
	}
	check := func(user string, want string, only func(rt route) bool) {
		t.Helper()
		n := 0
		for _, rt := range e.api.routes() {
			if rt.public || strings.HasPrefix(rt.pattern, "/v1/admin/") || !only(rt) {
				continue
			}
			id := "hpc"
			if strings.HasPrefix(rt.pattern, "/v1/transfers/{id}") {
				id = xfer
			}
			p := routePath(rt.pattern, map[string]string{"id": id, "name": "hpc", "path": strings.TrimPrefix(dir, "/"),
				"op": "mkdir", "grant_id": grant, "link_id": link})
			var body any
			if rt.method != "GET" && rt.method != "DELETE" {
				body = map[string]any{"id": "new", "host": e.srv.Host, "host_keys": []string{e.srv.AuthorizedHostKey()}, "name": "new",
					"hostname": e.srv.Host, "username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM), "command": "true",
					"principal": "user:bob", "path": dir, "access": "read", "systems": []string{"hpc"}}
			}
			if r := e.do(user, rt.method, p, body); rt.method == "HEAD" {
				if r.status != 403 { // a HEAD answer has no body to say why
					t.Errorf("%s %s: %d, want 403", rt.method, p, r.status)
				}
			} else if !refused(r, want) {
				t.Errorf("%s %s: %d %s, want 403 saying %q", rt.method, p, r.status, r.body, want)
			}
			n++
		}
		t.Logf("%d routes refused with %q", n, want)
	}
	admin := func(path string, off bool) {
		t.Helper()
		if r := e.do("root", "PUT", path, map[string]any{"disabled": off}); r.status != 200 {
			t.Fatalf("PUT %s: %d %s", path, r.status, r.body)
		}
	}

	admin("/v1/admin/users/alice/disabled", true)
	switched := time.Now()
	check("alice", `your user "alice" is disabled by an operator`, func(route) bool { return true })
	// The other instance refuses within its cache time.
	for {
		r := other.do("alice", "POST", "/v1/systems", map[string]any{"id": "late", "host": e.srv.Host, "host_keys": []string{e.srv.AuthorizedHostKey()}})
		if refused(r, "disabled by an operator") {
			break
		}
		if time.Since(switched) > b.access.Config().DisabledCacheTTL+time.Second {
			t.Fatalf("other instance still serves a disabled user after %v: %d %s", time.Since(switched), r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Links of a disabled user are refused too (404 or 403, never served).
	if r := e.do("", "GET", linkURL[len(e.url):], nil); r.status != 403 {
		t.Errorf("link of a disabled user: %d %s", r.status, r.body)
	}
	admin("/v1/admin/users/alice/disabled", false)

	admin("/v1/admin/users/alice/systems/hpc/disabled", true)
	check("alice", `system "hpc" is disabled by an operator`, func(rt route) bool {
		return strings.HasPrefix(rt.pattern, "/v1/systems/{id}") || rt.pattern == "/sshapi/v2/{name}"
	})
	if r := e.do("alice", "GET", "/v1/systems/hpc2", nil); r.status != 200 {
		t.Errorf("another system of the user: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/commands", map[string]any{"systems": []string{"hpc", "hpc2"}, "command": "true"}); r.status != 200 ||
		!strings.Contains(string(r.body), `system \"hpc\" is disabled by an operator`) {
		t.Errorf("fan-out naming a disabled system: %d %s", r.status, r.body)
	}
	admin("/v1/admin/users/alice/systems/hpc/disabled", false)

	// Operator routes keep working, even for an operator whose own user is switched off.
	admin("/v1/admin/users/root/disabled", true)
	if r := e.do("root", "GET", "/v1/admin/systems", nil); r.status != 200 {
		t.Errorf("admin systems for a disabled operator: %d %s", r.status, r.body)
	}
	if r := e.do("root", "GET", "/v1/systems", nil); !refused(r, "disabled by an operator") {
		t.Errorf("a disabled operator's own routes: %d %s", r.status, r.body)
	}
	admin("/v1/admin/users/root/disabled", false)
	if r := e.do("alice", "GET", "/v1/systems/hpc", nil); r.status != 200 {
		t.Errorf("re-enabled: %d %s", r.status, r.body)
	}
}

// TestDisableStopsRunningTransfer: an operator switches off a user whose transfer is running; its
// next range is refused and the transfer fails saying so.
func TestDisableStopsRunningTransfer(t *testing.T) {
	e, eng := newTransferEnv(t)
	e.api.deps.Verifier = operatorVerifier{Verifier: e.api.deps.Verifier, ops: []string{"root"}}
	srcDir, dstDir := e.slowSource(t, 8<<20, "alice", "own", 64<<20)
	r := e.do("alice", "POST", "/v1/transfers", map[string]any{
		"source": map[string]any{"system": "slow", "path": filepath.Join(srcDir, "f")}, "destination": map[string]any{"system": "own", "path": filepath.Join(dstDir, "f")},
		"chunk_size": 2 << 20, "streams": 2,
	})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	get := func() *transfer.Transfer {
		tr, err := eng.Get(t.Context(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	deadline := time.Now().Add(time.Minute)
	for tr := get(); tr.Status != transfer.StatusRunning || tr.BytesDone == 0; tr = get() {
		if time.Now().After(deadline) || tr.Status.Terminal() {
			t.Fatalf("never running: %+v", tr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := e.do("root", "PUT", "/v1/admin/users/alice/disabled", map[string]any{"disabled": true}); r.status != 200 {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	switched := time.Now()
	tr := get()
	for ; !tr.Status.Terminal(); tr = get() {
		if time.Since(switched) > time.Minute {
			t.Fatalf("still %s a minute after the user was disabled", tr.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tr.Status != transfer.StatusFailed || !strings.Contains(tr.Error, "disabled by an operator") || tr.BytesDone >= 64<<20 {
		t.Fatalf("after the switch: %s %q at %d bytes", tr.Status, tr.Error, tr.BytesDone)
	}
	t.Logf("disabled at %d MiB of 64; the transfer failed %v later: %s", tr.BytesDone>>20, time.Since(switched).Round(time.Millisecond), tr.Error)
}

// TestDownloadBufferShare: a user holding their whole share of the download buffers waits (then
// 503 saying so) while another user's download is served from the rest of the budget.
func TestDownloadBufferShare(t *testing.T) {
	cfg := Config{DownloadBufferBytes: 64 << 10, DownloadBufferBudgetBytes: 4 * 64 << 10, BudgetWait: 200 * time.Millisecond, StripeMaxChannels: 1}
	e := newEnvConfig(t, cfg, nil)
	e.register("alice", "hpc")
	e.register("bob", "hpc")
	dir := e.srv.MkTemp(t)
	_ = os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644)
	if got := e.api.downloads.Share(); got != 2*64<<10 {
		t.Fatalf("default share %d, want half the budget", got)
	}
	held, err := e.api.downloads.TryAcquire("alice", e.api.downloads.Share())
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do("alice", "GET", "/v1/systems/hpc/content"+dir+"/f", nil); r.status != 503 || !strings.Contains(string(r.body), "your whole share") {
		t.Fatalf("alice over her share: %d %s", r.status, r.body)
	}
	if r := e.do("bob", "GET", "/v1/systems/hpc/content"+dir+"/f", nil); r.status != 200 || string(r.body) != "data" {
		t.Fatalf("bob while alice holds her share: %d %s", r.status, r.body)
	}
	held.Release()
	if r := e.do("alice", "GET", "/v1/systems/hpc/content"+dir+"/f", nil); r.status != 200 {
		t.Fatalf("alice after release: %d %s", r.status, r.body)
	}
}

// TestDisabledCallerWritesNoOtherOwnersAudit: eve, whom an operator disabled and who has no
// grant on any of alice's systems, sends requests naming alice's system and one that does not
// exist. They are refused (403, her own switch), and they are not in alice's audit: refusals
// are recorded for their owner only on systems the caller can see. Before, the check of eve's
// own switch recorded each attempt as an action on alice's system, so anyone disabled could
// fill any owner's audit with entries naming systems of their choosing.
func TestDisabledCallerWritesNoOtherOwnersAudit(t *testing.T) {
	e := newEnv(t)
	e.api.deps.Verifier = operatorVerifier{Verifier: e.api.deps.Verifier, ops: []string{"root"}}
	e.register("alice", "hpc")
	if r := e.do("root", "PUT", "/v1/admin/users/eve/disabled", map[string]any{"disabled": true}); r.status != 200 {
		t.Fatalf("disable eve: %d %s", r.status, r.body)
	}
	for _, p := range []string{"/v1/systems/alice:hpc/ls/tmp", "/v1/systems/alice:invented/files/tmp/x"} {
		method := "GET"
		if strings.Contains(p, "/files/") {
			method = "DELETE"
		}
		if r := e.do("eve", method, p, nil); r.status != 403 || !strings.Contains(string(r.body), `your user \"eve\" is disabled`) {
			t.Fatalf("%s %s: %d %s, want 403 naming eve's switch", method, p, r.status, r.body)
		}
	}
	r := e.do("alice", "GET", "/v1/audit?limit=1000", nil)
	if r.status != 200 {
		t.Fatalf("audit: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), `"principal":"eve"`) {
		t.Fatalf("alice's audit holds eve's refused attempts on systems eve cannot see: %s", r.body)
	}
	// eve's refused attempts are hers: her own audit shows them, on no owner but herself.
	r = e.do("root", "GET", "/v1/admin/audit?principal=eve&limit=1000", nil)
	for _, en := range r.json(t)["entries"].([]any) {
		if owner := en.(map[string]any)["owner"]; owner != "eve" {
			t.Errorf("eve's refused attempt recorded on owner %v: %v", owner, en)
		}
	}
}
