package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/transfer"
	"github.com/sshapi/sshapi/internal/wanem"
)

// newTransferEnv is newEnv with a transfer engine on its own database, polling fast.
func newTransferEnv(t *testing.T) (*env, *transfer.Engine) {
	t.Helper()
	return newTransferEnvWith(t, transfer.Config{PollInterval: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond})
}

// newTransferEnvWith is newTransferEnv with the engine's configuration given.
func newTransferEnvWith(t *testing.T, cfg transfer.Config) (*env, *transfer.Engine) {
	t.Helper()
	var eng *transfer.Engine
	e := newEnvWith(t, withTransferEngine(t, cfg, &eng))
	return e, eng
}

// withTransferEngine is an extra for newEnvWith that starts a transfer engine on a SQLite file
// (stopped when t ends) and serves it; *eng is the engine once made.
func withTransferEngine(t *testing.T, cfg transfer.Config, eng **transfer.Engine) func(dir string, d *Deps, s **Server) {
	return func(dir string, d *Deps, s **Server) {
		tdb, err := transfer.OpenSQLite(t.Context(), filepath.Join(dir, "transfers.db"))
		if err != nil {
			t.Fatal(err)
		}
		*eng, err = transfer.New(cfg, transfer.Deps{DB: tdb, Pool: d.Pool, Resolver: lateResolver{s}, Log: d.Log})
		if err != nil {
			t.Fatal(err)
		}
		if err := (*eng).Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = (*eng).Stop(context.Background())
			tdb.Close()
		})
		d.Transfers = *eng
	}
}

// registerAt creates system id for user at addr (an sshd or a proxy in front of srv).
func (e *env) registerAt(user, id string, srv *sshtest.Server, addr string) {
	e.t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	r := e.do(user, "POST", "/v1/systems", map[string]any{"id": id, "host": host, "port": p, "host_keys": []string{srv.AuthorizedHostKey()}})
	if r.status != 201 {
		e.t.Fatalf("create system: %d %s", r.status, r.body)
	}
	r = e.do(user, "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)})
	if r.status != 200 {
		e.t.Fatalf("put credential: %d %s", r.status, r.body)
	}
}

// ownTree gives a local tree to the sshd user, as if it had written it.
func ownTree(t *testing.T, srv *sshtest.Server, root string) {
	t.Helper()
	u, err := user.Lookup(srv.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			err = os.Lchown(p, uid, gid)
		}
		return err
	})
}

func (e *env) waitTransfer(user, id string, timeout time.Duration) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := e.do(user, "GET", "/v1/transfers/"+id, nil)
		m := r.json(e.t.(*testing.T))
		if s, _ := m["status"].(string); transfer.Status(s).Terminal() {
			return m
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("transfer %s not finished: %s", id, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTransferValidationAndOwnership(t *testing.T) {
	e, _ := newTransferEnv(t)
	e.register("alice", "a")
	e.register("alice", "b")
	ok := func() map[string]any {
		return map[string]any{"source": map[string]any{"system": "a", "path": "/etc/hostname"}, "destination": map[string]any{"system": "b", "path": "x"}}
	}
	cases := []struct {
		name   string
		user   string
		body   any
		status int
		field  string // errors[0].field for 400s
		detail string // substring of detail otherwise
	}{
		{"missing source system", "alice", map[string]any{"source": map[string]any{"path": "x"}, "destination": map[string]any{"system": "b", "path": "x"}}, 400, "source.system", ""},
		{"missing destination path", "alice", map[string]any{"source": map[string]any{"system": "a", "path": "x"}, "destination": map[string]any{"system": "b"}}, 400, "destination.path", ""},
		{"bad sync", "alice", with(ok(), "sync", "sometimes"), 400, "sync", ""},
		{"bad verify", "alice", with(ok(), "verify", "md5"), 400, "verify", ""},
		{"too many streams", "alice", with(ok(), "streams", 99), 400, "streams", ""},
		{"tiny chunk", "alice", with(ok(), "chunk_size", 10), 400, "chunk_size", ""},
		{"bad deadline", "alice", with(ok(), "deadline", "soon"), 400, "deadline", ""},
		{"wrong type", "alice", with(ok(), "recursive", "yes"), 400, "recursive", ""},
		{"unknown field", "alice", with(ok(), "colour", "blue"), 400, "colour", ""},
		{"unknown destination system", "alice", map[string]any{"source": map[string]any{"system": "a", "path": "x"}, "destination": map[string]any{"system": "nope", "path": "x"}}, 404, "", `destination system "nope"`},
		{"unknown source system", "alice", map[string]any{"source": map[string]any{"system": "nope", "path": "x"}, "destination": map[string]any{"system": "b", "path": "x"}}, 404, "", `source system "nope"`},
		{"another user's systems", "bob", ok(), 404, "", `source system "a"`},
		{"no token", "", ok(), 401, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.user, "POST", "/v1/transfers", c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			var p Problem
			_ = json.Unmarshal(r.body, &p)
			if c.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != c.field) {
				t.Fatalf("problem %s does not name %s", r.body, c.field)
			}
			if c.detail != "" && !strings.Contains(p.Detail, c.detail) {
				t.Fatalf("detail %q does not mention %q", p.Detail, c.detail)
			}
		})
	}
	for _, q := range []struct{ path, field string }{
		{"/v1/transfers?status=bogus", "status"}, {"/v1/transfers?limit=0", "limit"},
	} {
		r := e.do("alice", "GET", q.path, nil)
		var p Problem
		_ = json.Unmarshal(r.body, &p)
		if r.status != 400 || len(p.Errors) == 0 || p.Errors[0].Field != q.field {
			t.Errorf("%s: %d %s", q.path, r.status, r.body)
		}
	}
}

func with(m map[string]any, k string, v any) map[string]any {
	m[k] = v
	return m
}

func TestTransferEndToEnd(t *testing.T) {
	e, _ := newTransferEnv(t)
	other := sshtest.New(t, sshtest.Options{})
	e.register("alice", "a")
	e.registerAt("alice", "b", other, other.Addr)
	srcDir, dstDir := e.srv.MkTemp(t), other.MkTemp(t)
	root := filepath.Join(srcDir, "data")
	big := make([]byte, 40<<20)
	_, _ = rand.Read(big)
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(root, "big.bin"), big, 0o644)
	for i := range 20 {
		_ = os.WriteFile(filepath.Join(root, "sub", fmt.Sprintf("f%02d", i)), []byte(strings.Repeat("x", i)), 0o644)
	}
	ownTree(t, e.srv, root)

	body := map[string]any{
		"source":      map[string]any{"system": "a", "path": root},
		"destination": map[string]any{"system": "b", "path": filepath.Join(dstDir, "copy")},
		"recursive":   true, "chunk_size": 4 << 20, "streams": 3, "idempotency_key": "job-1",
	}
	r := e.do("alice", "POST", "/v1/transfers", body)
	if r.status != 202 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	m := r.json(t)
	id, _ := m["id"].(string)
	if id == "" || m["status"] != "queued" || r.header.Get("Location") != "/v1/transfers/"+id {
		t.Fatalf("create: %s", r.body)
	}
	// The same key returns the same transfer; a different body with it is a conflict.
	if r := e.do("alice", "POST", "/v1/transfers", body); r.status != 200 || r.json(t)["id"] != id {
		t.Fatalf("repeat: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/transfers", with(body, "verify", "size")); r.status != 409 {
		t.Fatalf("reused key: %d %s", r.status, r.body)
	}

	// Live progress as Server-Sent Events, ending with "done".
	req, _ := http.NewRequest("GET", e.url+"/v1/transfers/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var events []string
	var final map[string]any
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			events = append(events, event)
		case strings.HasPrefix(line, "data: ") && event == "done":
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &final)
		}
	}
	if len(events) < 2 || events[0] != "progress" || events[len(events)-1] != "done" {
		t.Fatalf("events %v", events)
	}
	if final["status"] != "succeeded" {
		t.Fatalf("final event %v", final)
	}
	m = e.do("alice", "GET", "/v1/transfers/"+id, nil).json(t)
	for _, k := range []string{"id", "status", "bytes_total", "bytes_done", "files_total", "files_done", "files_failed", "rate_bytes_per_s", "eta_s", "attempts", "error", "created_at", "started_at", "finished_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("transfer lacks %q: %v", k, m)
		}
	}
	if m["status"] != "succeeded" || m["files_total"] != float64(21) || m["bytes_total"] != float64(len(big)+190) || m["bytes_done"] != m["bytes_total"] {
		t.Fatalf("transfer %v", m)
	}
	got, _ := os.ReadFile(filepath.Join(dstDir, "copy", "big.bin"))
	if !bytes.Equal(got, big) {
		t.Fatal("big.bin differs at the destination")
	}
	// Items: every file with its sha256, pages via next_after.
	r = e.do("alice", "GET", "/v1/transfers/"+id+"/items?limit=10", nil)
	var page struct {
		Items     []transfer.Item `json:"items"`
		NextAfter *int64          `json:"next_after"`
	}
	_ = json.Unmarshal(r.body, &page)
	if r.status != 200 || len(page.Items) != 10 || page.NextAfter == nil {
		t.Fatalf("items page: %d %s", r.status, r.body)
	}
	r = e.do("alice", "GET", fmt.Sprintf("/v1/transfers/%s/items?after=%d&status=done", id, *page.NextAfter), nil)
	var rest struct {
		Items []transfer.Item `json:"items"`
	}
	_ = json.Unmarshal(r.body, &rest)
	files := 0
	for _, it := range append(page.Items, rest.Items...) {
		if it.Kind == transfer.KindFile {
			files++
			if len(it.SHA256) != 64 || it.Status != transfer.ItemDone {
				t.Errorf("item %+v", it)
			}
		}
	}
	if files != 21 {
		t.Fatalf("%d file items", files)
	}
	// Listing by status.
	var list struct {
		Transfers []map[string]any `json:"transfers"`
	}
	_ = json.Unmarshal(e.do("alice", "GET", "/v1/transfers?status=succeeded", nil).body, &list)
	if len(list.Transfers) != 1 || list.Transfers[0]["id"] != id {
		t.Fatalf("list %v", list)
	}
	_ = json.Unmarshal(e.do("alice", "GET", "/v1/transfers?status=running", nil).body, &list)
	if len(list.Transfers) != 0 {
		t.Fatalf("running list %v", list)
	}
	// Only the owner sees it.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/transfers/" + id}, {"GET", "/v1/transfers/" + id + "/items"}, {"GET", "/v1/transfers/" + id + "/events"}, {"DELETE", "/v1/transfers/" + id},
	} {
		if r := e.do("bob", c.method, c.path, nil); r.status != 404 {
			t.Errorf("bob %s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	_ = json.Unmarshal(e.do("bob", "GET", "/v1/transfers", nil).body, &list)
	if len(list.Transfers) != 0 {
		t.Fatalf("bob lists %v", list)
	}
	// Canceling a finished transfer changes nothing.
	if r := e.do("alice", "DELETE", "/v1/transfers/"+id, nil); r.status != 200 || r.json(t)["status"] != "succeeded" {
		t.Fatalf("cancel finished: %d %s", r.status, r.body)
	}
}

// slowSource registers alice's system "slow", reaching the test sshd through a wanem proxy of
// rate bytes/s, and user's system own, reaching it directly; it makes a source and a
// destination directory owned by the sshd's user, with a file "f" of size random bytes in the
// source unless size is 0.
func (e *env) slowSource(t *testing.T, rate int64, user, own string, size int) (srcDir, dstDir string) {
	t.Helper()
	proxy, err := wanem.New(wanem.Config{Upstream: e.srv.Addr, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Stop() })
	e.registerAt("alice", "slow", e.srv, proxy.Addr().String())
	e.register(user, own)
	srcDir, dstDir = e.srv.MkTemp(t), e.srv.MkTemp(t)
	if size > 0 {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		if err := os.WriteFile(filepath.Join(srcDir, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ownTree(t, e.srv, srcDir)
	ownTree(t, e.srv, dstDir)
	return srcDir, dstDir
}

func TestTransferCancelOverAPI(t *testing.T) {
	e, eng := newTransferEnv(t)
	srcDir, dstDir := e.slowSource(t, 8<<20, "alice", "b", 64<<20)
	r := e.do("alice", "POST", "/v1/transfers", map[string]any{
		"source": map[string]any{"system": "slow", "path": filepath.Join(srcDir, "f")}, "destination": map[string]any{"system": "b", "path": filepath.Join(dstDir, "f")},
		"chunk_size": 4 << 20, "streams": 2,
	})
	if r.status != 202 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	deadline := time.Now().Add(time.Minute)
	for {
		m := e.do("alice", "GET", "/v1/transfers/"+id, nil).json(t)
		if m["status"] == "running" && m["bytes_done"].(float64) > 0 {
			if m["rate_bytes_per_s"].(float64) <= 0 && m["bytes_done"].(float64) > 8<<20 {
				t.Errorf("no rate while running: %v", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never running: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// An event stream ends with "shutdown" when the service begins to stop.
	req, _ := http.NewRequest("GET", e.url+"/v1/transfers/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, eng.BeginShutdown)
	stream, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(stream), "event: progress") || !strings.HasSuffix(string(stream), "event: shutdown\ndata: {}\n\n") {
		t.Fatalf("event stream at shutdown: %q", stream)
	}
	r = e.do("alice", "DELETE", "/v1/transfers/"+id, nil)
	if r.status != 200 || r.json(t)["status"] != "canceled" {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	entries, _ := os.ReadDir(dstDir)
	if len(entries) != 0 {
		t.Fatalf("destination not clean after cancel: %v", entries)
	}
	if m := e.waitTransfer("alice", id, 5*time.Second); m["status"] != "canceled" || m["finished_at"] == nil {
		t.Fatalf("after cancel %v", m)
	}
}

// lateResolver reaches the server's access layer once the server exists (the engine is built
// first), path-aware like the service's wiring.
type lateResolver struct{ s **Server }

func (l lateResolver) Resolve(ctx context.Context, owner, system string) (transfer.System, error) {
	return (*l.s).TransferResolver().Resolve(ctx, owner, system)
}

func (l lateResolver) ResolveEndpoint(ctx context.Context, owner string, ep transfer.Endpoint, write bool) (transfer.System, error) {
	return (*l.s).TransferResolver().(transfer.EndpointResolver).ResolveEndpoint(ctx, owner, ep, write)
}
