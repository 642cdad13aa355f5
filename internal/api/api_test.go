package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/store/sqlite"
)

// syncBuffer collects the server's log for secret checks.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type env struct {
	t      testing.TB
	url    string
	secret []byte
	log    *syncBuffer
	pool   *sshpool.Pool
	srv    *sshtest.Server
	seen   *syncBuffer // every response body, for secret checks
	api    *Server
}

func newEnv(t testing.TB) *env { return newEnvWith(t, nil) }

// newEnvWith builds a server on real parts (SQLite file, keyring, pool, sshd). extra, when not
// nil, may add collaborators to d before the server is made; *s is the server once it exists.
func newEnvWith(t testing.TB, extra func(dir string, d *Deps, s **Server)) *env {
	t.Helper()
	return newEnvConfig(t, Config{}, extra)
}

// newEnvConfig is newEnvWith with the server's Config.
func newEnvConfig(t testing.TB, cfg Config, extra func(dir string, d *Deps, s **Server)) *env {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "sshapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	kr, err := secret.NewKeyring("k1", map[string][]byte{"k1": key})
	if err != nil {
		t.Fatal(err)
	}
	sec := make([]byte, 32)
	_, _ = rand.Read(sec)
	v, err := auth.NewHS256Verifier(sec)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pool := sshpool.New(sshpool.Config{}, log, nil)
	_ = pool.Start(ctx)
	t.Cleanup(func() { _ = pool.Stop(context.Background()) })
	d := Deps{Store: db, Keyring: kr, Pool: pool, Verifier: v, Log: log, Version: "test"}
	var s *Server
	if extra != nil {
		extra(dir, &d, &s)
	}
	if d.Access == nil { // as the service wires it: started, so audit entries are written in batches
		d.Access = access.New(access.Config{}, access.Deps{Store: d.Store, Keyring: d.Keyring, Network: d.Network, Log: d.Log})
		d.Access.Start(ctx)
		t.Cleanup(d.Access.Stop)
	}
	s = New(cfg, d)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	s.SetListenURL(hs.URL) // as the service does when http.public_url is unset
	return &env{t: t, url: hs.URL, secret: sec, log: logs, pool: pool, srv: sshtest.New(t, sshtest.Options{}), seen: &syncBuffer{}, api: s}
}

func (e *env) token(user string) string {
	tok, err := auth.IssueHS256(e.secret, user, time.Hour, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.body)
	}
	return m
}

// do sends a request as user ("" = no token). body may be a string (sent raw) or a value.
func (e *env) do(user, method, path string, body any, hdr ...string) resp {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+e.token(user))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	e.seen.Write(b)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// register creates system id for user pointing at the test sshd, with the sshd's credential.
func (e *env) register(user, id string) {
	e.t.Helper()
	r := e.do(user, "POST", "/v1/systems", map[string]any{"id": id, "host": e.srv.Host, "port": e.srv.Port, "host_keys": []string{e.srv.AuthorizedHostKey()}})
	if r.status != 201 {
		e.t.Fatalf("create system: %d %s", r.status, r.body)
	}
	r = e.do(user, "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)})
	if r.status != 200 {
		e.t.Fatalf("put credential: %d %s", r.status, r.body)
	}
}

func TestCommandsEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo hi; printf '\\377\\376' >&2; exit 7"})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	m := r.json(t)
	if m["exit_status"] != float64(7) || m["stdout"] != "hi\n" || m["stderr"] != "//4=" || m["stderr_encoding"] != "base64" {
		t.Fatalf("result %v", m)
	}
	// Credential metadata, never the key.
	r = e.do("alice", "GET", "/v1/systems/hpc/credential", nil)
	if m := r.json(t); r.status != 200 || m["public_key_fingerprint"] != ssh.FingerprintSHA256(e.srv.Signer.PublicKey()) || m["key_type"] != "ssh-ed25519" {
		t.Fatalf("credential metadata %d %s", r.status, r.body)
	}
	r = e.do("alice", "POST", "/v1/systems/hpc/credential/check", nil)
	if m := r.json(t); m["ok"] != true {
		t.Fatalf("check: %s", r.body)
	}
	// Fan-out over several systems, one failing.
	e.register("alice", "hpc2")
	r = e.do("alice", "POST", "/v1/commands", map[string]any{"systems": []string{"hpc", "hpc2", "nope"}, "command": "echo ok"})
	var multi struct {
		Results []struct {
			System string
			Result *struct {
				Stdout string `json:"stdout"`
			}
			Error *Problem
		}
	}
	_ = json.Unmarshal(r.body, &multi)
	if r.status != 200 || len(multi.Results) != 3 || multi.Results[0].Result.Stdout != "ok\n" || multi.Results[1].Result.Stdout != "ok\n" ||
		multi.Results[2].Error == nil || multi.Results[2].Error.Status != 404 {
		t.Fatalf("fan-out: %d %s", r.status, r.body)
	}
}

func TestNDJSONStreaming(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	req, _ := http.NewRequest("POST", e.url+"/v1/systems/hpc/commands", strings.NewReader(`{"command":"echo a; sleep 0.4; echo b; exit 2"}`))
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	req.Header.Set("Accept", "application/x-ndjson")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	var lines []map[string]any
	var arrivals []time.Time
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
		arrivals = append(arrivals, time.Now())
	}
	if len(lines) < 3 || lines[0]["data"] != "a\n" {
		t.Fatalf("events %v", lines)
	}
	last := lines[len(lines)-1]
	if last["type"] != "exit" || last["result"].(map[string]any)["exit_status"] != float64(2) {
		t.Fatalf("last event %v", last)
	}
	if arrivals[len(arrivals)-1].Sub(arrivals[0]) < 300*time.Millisecond {
		t.Fatal("first event was not streamed before the command finished")
	}
}

// TestFiveHundredConcurrentRequests pushes 500 simultaneous command requests for one user and
// system through the HTTP API and a stock sshd: zero errors.
func TestFiveHundredConcurrentRequests(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	tok := e.token("alice")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 500}}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var first atomic.Value
	start := time.Now()
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", e.url+"/v1/systems/hpc/commands", strings.NewReader(fmt.Sprintf(`{"command":"echo %d"}`, i)))
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				first.CompareAndSwap(nil, err.Error())
				return
			}
			defer res.Body.Close()
			var out struct {
				Stdout     string `json:"stdout"`
				ExitStatus *int   `json:"exit_status"`
			}
			b, _ := io.ReadAll(res.Body)
			_ = json.Unmarshal(b, &out)
			if res.StatusCode != 200 || out.Stdout != fmt.Sprintf("%d\n", i) || out.ExitStatus == nil || *out.ExitStatus != 0 {
				failed.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("%d %s", res.StatusCode, b))
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of 500 requests failed; first: %v", n, first.Load())
	}
	t.Logf("500 concurrent requests in %s; pool %+v", time.Since(start), e.pool.Stats())
	if strings.Contains(e.srv.Log(), "drop connection") || strings.Contains(e.srv.Log(), "exceeded MaxStartups") {
		t.Errorf("sshd dropped connections (MaxStartups):\n%s", e.srv.Log())
	}
}

func TestTimeoutKillsRemoteSleep(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	marker := fmt.Sprint(200000 + time.Now().UnixNano()%100000)
	r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "sleep " + marker + " ; true", "timeout_s": 0.5})
	if m := r.json(t); r.status != 200 || m["timed_out"] != true {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output()
		if len(bytes.TrimSpace(out)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote sleep survived the timeout: %s", out)
		}
	}
}

func TestHostKeyMismatchRefused(t *testing.T) {
	e := newEnv(t)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _ := ssh.NewPublicKey(other.Public())
	r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "evil", "host": e.srv.Host, "port": e.srv.Port, "host_keys": []string{string(ssh.MarshalAuthorizedKey(otherPub))}})
	if r.status != 201 {
		t.Fatal(string(r.body))
	}
	e.do("alice", "PUT", "/v1/systems/evil/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)})
	r = e.do("alice", "POST", "/v1/systems/evil/commands", map[string]any{"command": "touch /tmp/should-not-run"})
	m := r.json(t)
	if r.status != 502 || m["title"] != "SSH host key mismatch" || !strings.Contains(m["detail"].(string), ssh.FingerprintSHA256(e.srv.HostKey)) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if strings.Contains(e.srv.Log(), "publickey") {
		t.Fatalf("credential offered to a server with the wrong host key:\n%s", e.srv.Log())
	}
}

func TestTrustOnFirstUsePinsKey(t *testing.T) {
	e := newEnv(t)
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "tofu", "host": e.srv.Host, "port": e.srv.Port, "trust_on_first_use": true}); r.status != 201 {
		t.Fatal(string(r.body))
	}
	e.do("alice", "PUT", "/v1/systems/tofu/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)})
	if r := e.do("alice", "POST", "/v1/systems/tofu/commands", map[string]any{"command": "true"}); r.status != 200 {
		t.Fatal(string(r.body))
	}
	m := e.do("alice", "GET", "/v1/systems/tofu", nil).json(t)
	keys := m["host_keys"].([]any)
	if len(keys) != 1 || keys[0] != e.srv.AuthorizedHostKey() || m["trust_on_first_use"] != false {
		t.Fatalf("key not pinned: %v", m)
	}
}

func TestIsolationBetweenUsers(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/systems/hpc"},
		{"PATCH", "/v1/systems/hpc"},
		{"DELETE", "/v1/systems/hpc"},
		{"GET", "/v1/systems/hpc/credential"},
		{"PUT", "/v1/systems/hpc/credential"},
		{"DELETE", "/v1/systems/hpc/credential"},
		{"POST", "/v1/systems/hpc/credential/check"},
		{"POST", "/v1/systems/hpc/commands"},
		{"POST", "/sshapi/v2/hpc"},
	} {
		var body any = map[string]any{"command": "touch /tmp/bob-was-here"}
		if tc.method == "PATCH" {
			body = map[string]any{"description": "x"}
		}
		if tc.path == "/v1/systems/hpc/credential" && tc.method == "PUT" {
			body = map[string]any{"username": "x", "private_key": string(e.srv.PrivateKeyPEM)}
		}
		if r := e.do("bob", tc.method, tc.path, body); r.status != 404 || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("bob %s %s: %d %s, want 404 problem", tc.method, tc.path, r.status, r.body)
		}
	}
	if r := e.do("bob", "GET", "/v1/systems", nil); strings.Contains(string(r.body), "hpc") {
		t.Errorf("bob's list shows alice's system: %s", r.body)
	}
	if r := e.do("bob", "GET", "/v1/audit", nil); strings.Contains(string(r.body), "hpc") {
		t.Errorf("bob's audit log shows alice's actions: %s", r.body)
	}
	var audit struct {
		Entries []struct{ Action, System, Detail string }
	}
	_ = json.Unmarshal(e.do("alice", "GET", "/v1/audit?limit=5", nil).body, &audit)
	if len(audit.Entries) != 2 || audit.Entries[0].Action != "credential.put" || audit.Entries[1].Action != "system.create" || audit.Entries[0].System != "hpc" {
		t.Errorf("alice's audit log, newest first: %+v", audit.Entries)
	}
	if r := e.do("bob", "POST", "/v1/commands", map[string]any{"systems": []string{"hpc"}, "command": "true"}); !strings.Contains(string(r.body), `"status":404`) {
		t.Errorf("fan-out reached alice's system: %s", r.body)
	}
	// bob may use the same id for his own system.
	if r := e.do("bob", "POST", "/v1/systems", map[string]any{"id": "hpc", "host": "127.0.0.1", "trust_on_first_use": true}); r.status != 201 {
		t.Errorf("bob's own hpc: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/hpc", nil); r.json(t)["host"] != e.srv.Host || r.json(t)["port"] != float64(e.srv.Port) {
		t.Errorf("alice's system changed: %s", r.body)
	}
}

func TestBadInputIsProblemJSON(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKeyWithPassphrase(edKey, "", []byte("pw"))
	encrypted := string(pem.EncodeToMemory(block))
	tests := []struct {
		name, method, path string
		body               any
		status             int
		field              string
	}{
		{"malformed JSON", "POST", "/v1/systems", `{"id": "x",`, 400, ""},
		{"not an object", "POST", "/v1/systems", `[1,2]`, 400, "(body)"},
		{"unknown field", "POST", "/v1/systems", map[string]any{"id": "x", "host": "h", "trust_on_first_use": true, "colour": 1}, 400, "colour"},
		{"wrong type", "POST", "/v1/systems", map[string]any{"id": "x", "host": "h", "port": "22"}, 400, "port"},
		{"missing host", "POST", "/v1/systems", map[string]any{"id": "x", "trust_on_first_use": true}, 400, "host"},
		{"bad id", "POST", "/v1/systems", map[string]any{"id": "../x", "host": "h", "trust_on_first_use": true}, 400, "id"},
		{"no host key, no TOFU", "POST", "/v1/systems", map[string]any{"id": "x", "host": "h"}, 400, "host_keys"},
		{"bad host key", "POST", "/v1/systems", map[string]any{"id": "x", "host": "h", "host_keys": []string{"ssh-ed25519 nope"}}, 400, "host_keys"},
		{"bad fingerprint", "POST", "/v1/systems", map[string]any{"id": "x", "host": "h", "host_key_fingerprints": []string{"MD5:aa"}}, 400, "host_key_fingerprints"},
		{"port out of range", "POST", "/v1/systems", map[string]any{"id": "x", "host": "h", "port": 70000, "trust_on_first_use": true}, 400, "port"},
		{"duplicate id", "POST", "/v1/systems", map[string]any{"id": "hpc", "host": "h", "trust_on_first_use": true}, 409, ""},
		{"garbage key", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": "u", "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"}, 400, "private_key"},
		{"missing key", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": "u"}, 400, "private_key"},
		{"missing username", "PUT", "/v1/systems/hpc/credential", map[string]any{"private_key": "x"}, 400, "username"},
		{"encrypted key without passphrase", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": "u", "private_key": encrypted}, 400, "passphrase"},
		{"wrong passphrase", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": "u", "private_key": encrypted, "passphrase": "nope"}, 400, "passphrase"},
		{"missing command", "POST", "/v1/systems/hpc/commands", map[string]any{}, 400, "command"},
		{"negative timeout", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true", "timeout_s": -1}, 400, "timeout_s"},
		{"empty body", "POST", "/v1/systems/hpc/commands", "", 400, ""},
		{"oversized body", "POST", "/v1/systems/hpc/commands", `{"command":"` + strings.Repeat("x", 2<<20) + `"}`, 413, ""},
		{"unknown system", "POST", "/v1/systems/nope/commands", map[string]any{"command": "true"}, 404, ""},
		{"unknown route", "GET", "/v1/nothing", nil, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("alice", tc.method, tc.path, tc.body)
			if r.status != tc.status || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d %q %s, want %d problem+json", r.status, r.header.Get("Content-Type"), r.body, tc.status)
			}
			m := r.json(t)
			if m["status"] != float64(tc.status) || m["title"] == "" || m["detail"] == "" {
				t.Fatalf("problem body %s", r.body)
			}
			if tc.field != "" {
				errs, _ := m["errors"].([]any)
				if len(errs) == 0 || errs[0].(map[string]any)["field"] != tc.field {
					t.Fatalf("problem does not name field %q: %s", tc.field, r.body)
				}
			}
		})
	}
	// A correct encrypted key with its passphrase works, and nothing failed above changed state.
	r := e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": e.srv.User, "private_key": encrypted, "passphrase": "pw"})
	if r.status != 200 {
		t.Fatalf("encrypted key with passphrase: %d %s", r.status, r.body)
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	noExp, _ := auth.IssueHS256(e.secret, "alice", 0, time.Now())
	tests := []struct {
		name, header string
	}{
		{"no header", ""},
		{"not bearer", "Basic YWxpY2U6eA=="},
		{"garbage", "Bearer abc.def.ghi"},
		{"expired or no exp", "Bearer " + noExp},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest("GET", e.url+"/v1/systems", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 401 || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d", tc.name, res.StatusCode)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/v1/version", "/metrics", "/openapi.json", "/sshapi/v2/"} {
		if r := e.do("", "GET", p, nil); r.status != 200 {
			t.Errorf("public %s: %d", p, r.status)
		}
	}
}

func TestStudyRoutes(t *testing.T) {
	e := newEnv(t)
	if r := e.do("", "GET", "/sshapi/v2/", nil); r.status != 200 || !strings.Contains(string(r.body), "Welcome") {
		t.Fatalf("welcome: %d %s", r.status, r.body)
	}
	r := e.do("carol", "POST", "/sshapi/v2", map[string]any{"name": "stampede", "hostname": e.srv.Host, "port": e.srv.Port, "username": e.srv.User,
		"private_key": string(e.srv.PrivateKeyPEM), "host_key": e.srv.AuthorizedHostKey()})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	r = e.do("carol", "GET", "/sshapi/v2", nil)
	var list []map[string]any
	_ = json.Unmarshal(r.body, &list)
	if len(list) != 1 || list[0]["name"] != "stampede" || list[0]["username"] != e.srv.User || list[0]["port"] != float64(e.srv.Port) || len(list[0]) != 4 {
		t.Fatalf("list: %s", r.body)
	}
	r = e.do("carol", "POST", "/sshapi/v2/stampede", map[string]any{"command": "uptime"})
	if m := r.json(t); r.status != 200 || !strings.Contains(m["stdout"].(string), "load average") {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	// Bad key: nothing is created.
	r = e.do("carol", "POST", "/sshapi/v2", map[string]any{"name": "half", "hostname": "h", "username": "u", "private_key": "junk", "trust_on_first_use": true})
	if r.status != 400 {
		t.Fatalf("bad key: %d %s", r.status, r.body)
	}
	if r := e.do("carol", "GET", "/v1/systems/half", nil); r.status != 404 {
		t.Fatalf("half-created system left behind: %d", r.status)
	}
	if r := e.do("carol", "POST", "/sshapi/v2", map[string]any{"name": "x", "username": "u", "private_key": "junk", "trust_on_first_use": true}); !strings.Contains(string(r.body), `"field":"hostname"`) {
		t.Fatalf("missing hostname not named in the paper's terms: %s", r.body)
	}
}

// TestSecretsNeverLeak runs the credential through every route, then searches all responses and
// the server log for the private key and the token.
func TestSecretsNeverLeak(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	e.do("alice", "GET", "/v1/systems/hpc/credential", nil)
	e.do("alice", "GET", "/v1/systems", nil)
	e.do("alice", "GET", "/v1/systems/hpc", nil)
	e.do("alice", "GET", "/sshapi/v2", nil)
	e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"})
	e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": "x", "private_key": string(e.srv.PrivateKeyPEM)[:200]})
	e.do("alice", "POST", "/sshapi/v2", map[string]any{"name": "x2", "hostname": e.srv.Host, "username": "u", "private_key": string(e.srv.PrivateKeyPEM), "passphrase": "hunter2-secret", "trust_on_first_use": true})
	e.do("alice", "GET", "/v1/audit", nil)
	body := string(e.srv.PrivateKeyPEM)
	lines := strings.Split(strings.TrimSpace(body), "\n")
	needles := append([]string{"hunter2-secret", e.token("alice")[:40]}, lines[1:len(lines)-1]...)
	for _, hay := range []struct{ name, text string }{{"responses", e.seen.String()}, {"server log", e.log.String()}} {
		for _, n := range needles {
			if len(n) > 10 && strings.Contains(hay.text, n) {
				t.Errorf("%s contain secret material %q", hay.name, n[:10])
			}
		}
	}
}

func TestCredentialChangeUsesNewKey(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	// A key the server does not accept: the next command fails with an auth error, and the
	// breaker keeps further requests from dialing.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "")
	if r := e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": e.srv.User, "private_key": string(pem.EncodeToMemory(block))}); r.status != 200 {
		t.Fatal(string(r.body))
	}
	for range 3 {
		r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"})
		if r.status != 502 || r.json(t)["title"] != "SSH authentication failed" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	if n := strings.Count(e.srv.Log(), "Failed publickey"); n != 1 {
		t.Errorf("server saw %d failed logins, want 1 (breaker)", n)
	}
	r := e.do("alice", "POST", "/v1/systems/hpc/credential/check", nil)
	if m := r.json(t); m["ok"] != false || m["error"] == "" {
		t.Fatalf("check with a bad key: %s", r.body)
	}
	e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)})
	if r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}); r.status != 200 {
		t.Fatalf("after fixing the credential: %d %s", r.status, r.body)
	}
}

func TestSSHDRestartUnderLoadViaAPI(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }() // also when an await below fails the test
	var okBefore, okAfter atomic.Int64
	var restarted atomic.Bool
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo x"})
				switch {
				case r.status == 200 && restarted.Load():
					okAfter.Add(1)
				case r.status == 200:
					okBefore.Add(1)
				}
				if r.status != 200 && r.header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("failure during restart is not problem+json: %d %s", r.status, r.body)
				}
			}
		}()
	}
	awaitState(t, "load to flow", func() bool { return okBefore.Load() >= 20 })
	e.srv.Kill()
	// Requests may fail or wait for a new connection; what must happen is that the pool notices
	// every connection died.
	awaitState(t, "the pool to drop the dead connections", func() bool { return e.pool.Stats().Conns == 0 })
	if err := e.srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	restarted.Store(true)
	awaitState(t, "requests to succeed after the restart", func() bool { return okAfter.Load() >= 10 })
}

// TestOpenAPIMatchesRouter fails when a route is added without documenting it, or documented
// without existing.
func TestOpenAPIMatchesRouter(t *testing.T) {
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	var documented, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	wild := regexp.MustCompile(`\{(\w+)\.\.\.\}`)
	s := New(Config{}, Deps{})
	for _, rt := range s.routes() {
		p := strings.ReplaceAll(rt.pattern, "{$}", "")
		p = wild.ReplaceAllString(p, "{$1}")
		served = append(served, rt.method+" "+p)
	}
	sort.Strings(documented)
	sort.Strings(served)
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Fatalf("router and OpenAPI document disagree\nserved:\n%s\n\ndocumented:\n%s", strings.Join(served, "\n"), strings.Join(documented, "\n"))
	}
	if errs, err := documentedStatusErrors(openapiYAML, s.routes()); err != nil || len(errs) > 0 {
		t.Fatalf("documented statuses (%v):\n%s", err, strings.Join(errs, "\n"))
	}
	e := newEnv(t)
	if r := e.do("", "GET", "/openapi.json", nil); r.status != 200 || r.json(t)["openapi"] != "3.1.0" {
		t.Fatalf("served document: %d", r.status)
	}
	r := e.do("", "GET", "/openapi.yaml", nil)
	var servedYAML struct {
		OpenAPI string `yaml:"openapi"`
	}
	if err := yaml.Unmarshal(r.body, &servedYAML); r.status != 200 || r.header.Get("Content-Type") != "application/yaml" || err != nil || servedYAML.OpenAPI != "3.1.0" {
		t.Fatalf("served YAML document: %d %q %v %q", r.status, r.header.Get("Content-Type"), err, servedYAML.OpenAPI)
	}
}

// TestContentTypes: `curl -d` sends form-urlencoded by default and must work with a JSON body;
// a body declared as something else is refused.
func TestContentTypes(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		ct     string
		status int
	}{
		{"", 201},
		{"application/json; charset=utf-8", 201},
		{"application/x-www-form-urlencoded", 201},
		{"application/merge-patch+json", 201},
		{"application/xml", 415},
		{"multipart/form-data; boundary=x", 415},
	}
	for i, tc := range tests {
		body := map[string]any{"id": fmt.Sprintf("s%d", i), "host": "h", "trust_on_first_use": true}
		var hdr []string
		if tc.ct != "" {
			hdr = []string{"Content-Type", tc.ct}
		}
		if r := e.do("alice", "POST", "/v1/systems", body, hdr...); r.status != tc.status {
			t.Errorf("Content-Type %q: %d %s, want %d", tc.ct, r.status, r.body, tc.status)
		}
	}
}

// awaitState polls cond until it holds, failing the test after 20 s with what it waited for.
func awaitState(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
