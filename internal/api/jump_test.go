package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// registerWith creates system id for user at srv's host and port (or host), with fields merged in,
// and stores srv's credential for it.
func (e *env) registerWith(user, id string, srv *sshtest.Server, host string, fields map[string]any) {
	e.t.Helper()
	if host == "" {
		host = srv.Host
	}
	body := map[string]any{"id": id, "host": host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}}
	for k, v := range fields {
		body[k] = v
	}
	if r := e.do(user, "POST", "/v1/systems", body); r.status != 201 {
		e.t.Fatalf("create system %s: %d %s", id, r.status, r.body)
	}
	r := e.do(user, "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)})
	if r.status != 200 {
		e.t.Fatalf("put credential %s: %d %s", id, r.status, r.body)
	}
}

// TestJumpHostQuickstart runs the quickstart flow (register, credential, check, command, ls,
// upload, download) against a system that only its jump host can reach: the target sshd
// listens on the loopback of a network namespace, the jump sshd on that namespace's veth
// address. The jump sshd's log shows the forwarding.
func TestJumpHostQuickstart(t *testing.T) {
	e := newEnv(t)
	pair := sshtest.NewJumpPair(t, sshtest.Options{})
	e.registerWith("alice", "bastion", pair.Jump, "", nil)
	e.registerWith("alice", "inner", pair.Target, "", map[string]any{"jump": "bastion",
		"ciphers": []string{"aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com"}, "kex": []string{"curve25519-sha256"}})
	base := "/v1/systems/inner"

	r := e.do("alice", "GET", base, nil)
	if m := r.json(t); r.status != 200 || m["jump"] != "bastion" || len(m["ciphers"].([]any)) != 2 || len(m["kex"].([]any)) != 1 {
		t.Fatalf("get system: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", base+"/credential/check", nil); r.json(t)["ok"] != true {
		t.Fatalf("check through the jump host: %s", r.body)
	}
	r = e.do("alice", "POST", base+"/commands", map[string]any{"command": "echo via-jump; echo $SSH_CONNECTION"})
	if m := r.json(t); r.status != 200 || !strings.HasPrefix(m["stdout"].(string), "via-jump\n127.0.0.1 ") {
		t.Fatalf("command: %d %s", r.status, r.body)
	}

	dir := pair.Target.MkTemp(t)
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chownTree(t, dir, pair.Target.User)
	D := remote(dir)
	if r := e.do("alice", "GET", base+"/ls/"+D, nil); r.status != 200 || !strings.Contains(string(r.body), `"hello.txt"`) {
		t.Fatalf("ls: %d %s", r.status, r.body)
	}
	payload := bytes.Repeat([]byte("jump host payload "), 1<<15)
	sum := sha256.Sum256(payload)
	r = e.do("alice", "PUT", base+"/content/"+D+"/up.bin", string(payload), "X-Checksum-Sha256", hex.EncodeToString(sum[:]))
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "up.bin")); err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("uploaded file differs: %v", err)
	}
	if r := e.do("alice", "GET", base+"/content/"+D+"/up.bin", nil); r.status != 200 || !bytes.Equal(r.body, payload) {
		t.Fatalf("download: %d, %d bytes", r.status, len(r.body))
	}
	if want := "target 127.0.0.1 port " + strconv.Itoa(pair.Target.Port); !strings.Contains(pair.Jump.Log(), want) {
		t.Fatalf("jump sshd log lacks %q", want)
	}

	// The jump host is in use: it cannot be deleted, and a jump credential problem names it.
	if r := e.do("alice", "DELETE", "/v1/systems/bastion", nil); r.status != 409 || !strings.Contains(string(r.body), "inner") {
		t.Fatalf("delete a jump host in use: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "DELETE", "/v1/systems/bastion/credential", nil); r.status != 204 {
		t.Fatalf("delete jump credential: %d %s", r.status, r.body)
	}
	r = e.do("alice", "POST", base+"/commands", map[string]any{"command": "true"})
	if r.status != 409 || !strings.Contains(string(r.body), "bastion") {
		t.Fatalf("command without a jump credential: %d %s", r.status, r.body)
	}
	other := sshtest.New(t, sshtest.Options{}) // a key the jump host does not accept
	r = e.do("alice", "PUT", "/v1/systems/bastion/credential", map[string]any{"username": pair.Jump.User, "private_key": string(other.PrivateKeyPEM)})
	if r.status != 200 {
		t.Fatalf("put credential: %d %s", r.status, r.body)
	}
	r = e.do("alice", "POST", base+"/commands", map[string]any{"command": "true"})
	if m := r.json(t); r.status != 502 || m["title"] != "SSH authentication failed at the jump host" || !strings.Contains(m["detail"].(string), "alice/bastion") {
		t.Fatalf("command with a refused jump credential: %d %s", r.status, r.body)
	}
}

// TestSystemRouteValidation: jump, ciphers, kex and the network policy on host are checked at
// create and patch, with 400 problems naming the field.
func TestSystemRouteValidation(t *testing.T) {
	np, err := netpolicy.New(netpolicy.Config{AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) { d.Network = np })
	e.register("alice", "a")
	e.register("alice", "b")
	e.register("bob", "bobs")
	key := []string{e.srv.AuthorizedHostKey()}
	sys := func(id, host string, extra map[string]any) map[string]any {
		m := map[string]any{"id": id, "host": host, "host_keys": key}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	paper := func(name, host string) map[string]any {
		return map[string]any{"name": name, "hostname": host, "username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM), "host_key": key[0]}
	}
	tests := []struct {
		name   string
		method string
		path   string
		body   map[string]any
		field  string
	}{
		{"cloud metadata", "POST", "/v1/systems", sys("m", "169.254.169.254", nil), "host"},
		{"link-local v6", "POST", "/v1/systems", sys("m", "fe80::1", nil), "host"},
		{"multicast", "POST", "/v1/systems", sys("m", "224.0.0.1", nil), "host"},
		{"unspecified", "POST", "/v1/systems", sys("m", "0.0.0.0", nil), "host"},
		{"patch to metadata", "PATCH", "/v1/systems/a", map[string]any{"host": "169.254.169.254"}, "host"},
		{"unknown jump", "POST", "/v1/systems", sys("m", "10.0.0.1", map[string]any{"jump": "nope"}), "jump"},
		{"another user's system as jump", "POST", "/v1/systems", sys("m", "10.0.0.1", map[string]any{"jump": "bobs"}), "jump"},
		{"self as jump", "PATCH", "/v1/systems/a", map[string]any{"jump": "a"}, "jump"},
		{"unknown cipher", "POST", "/v1/systems", sys("m", "10.0.0.1", map[string]any{"ciphers": []string{"aes128-gcm@openssh.com", "none"}}), "ciphers"},
		{"duplicate cipher", "POST", "/v1/systems", sys("m", "10.0.0.1", map[string]any{"ciphers": []string{"aes256-ctr", "aes256-ctr"}}), "ciphers"},
		{"unknown kex", "PATCH", "/v1/systems/a", map[string]any{"kex": []string{"diffie-hellman-group-exchange-sha1-nope"}}, "kex"},
		// The study's route registers systems too, through the same check.
		{"study route, cloud metadata", "POST", "/sshapi/v2", paper("m", "169.254.169.254"), "hostname"},
		{"study route, link-local v6", "POST", "/sshapi/v2", paper("m", "fe80::1"), "hostname"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("alice", tc.method, tc.path, tc.body)
			if r.status != 400 || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if errs, _ := r.json(t)["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["field"] != tc.field {
				t.Fatalf("want the problem to name %q: %s", tc.field, r.body)
			}
		})
	}
	// A loop of jump hosts is refused: a -> b, then b -> a.
	if r := e.do("alice", "PATCH", "/v1/systems/a", map[string]any{"jump": "b"}); r.status != 200 {
		t.Fatalf("a via b: %d %s", r.status, r.body)
	}
	r := e.do("alice", "PATCH", "/v1/systems/b", map[string]any{"jump": "a"})
	if r.status != 400 || !strings.Contains(string(r.body), "loop") {
		t.Fatalf("b via a: %d %s", r.status, r.body)
	}
	// Through a jump host the host is the jump host's business: its own loopback is fine even
	// where the policy would refuse it for a direct dial.
	if r := e.do("alice", "POST", "/v1/systems", sys("m", "169.254.169.254", map[string]any{"jump": "b"})); r.status != 201 {
		t.Fatalf("host behind a jump host: %d %s", r.status, r.body)
	}
	// Valid algorithm lists are kept in order and can be cleared.
	if r := e.do("alice", "PATCH", "/v1/systems/b", map[string]any{"ciphers": []string{"chacha20-poly1305@openssh.com", "aes256-ctr"}}); r.status != 200 ||
		!strings.Contains(string(r.body), `"ciphers":["chacha20-poly1305@openssh.com","aes256-ctr"]`) {
		t.Fatalf("set ciphers: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/b/commands", map[string]any{"command": "echo ok"}); r.status != 200 {
		t.Fatalf("command with a cipher list: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PATCH", "/v1/systems/b", map[string]any{"ciphers": []string{}}); r.status != 200 || strings.Contains(string(r.body), `"ciphers"`) {
		t.Fatalf("clear ciphers: %d %s", r.status, r.body)
	}
}

// TestNetworkPolicyRefusesLoopbackDial: with a policy that denies loopback, a system whose host
// name resolves to loopback passes registration (a name is checked when dialed) and is refused
// at dial time with a 502 problem, at once and without reaching sshd.
func TestNetworkPolicyRefusesLoopbackDial(t *testing.T) {
	np, err := netpolicy.New(netpolicy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) {
		pool := sshpool.New(sshpool.Config{}, d.Log, nil, sshpool.WithNetworkPolicy(np))
		_ = pool.Start(t.Context())
		t.Cleanup(func() { _ = pool.Stop(t.Context()) })
		d.Pool, d.Network = pool, np
	})
	r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "lo", "host": e.srv.Host, "port": e.srv.Port, "host_keys": []string{e.srv.AuthorizedHostKey()}})
	if r.status != 400 || !strings.Contains(string(r.body), "loopback") {
		t.Fatalf("literal loopback: %d %s", r.status, r.body)
	}
	conns := strings.Count(e.srv.Log(), "Connection from")
	e.registerWith("alice", "byname", e.srv, "localhost", nil)
	r = e.do("alice", "POST", "/v1/systems/byname/commands", map[string]any{"command": "true"})
	if m := r.json(t); r.status != 502 || r.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(m["detail"].(string), "loopback") {
		t.Fatalf("command on a loopback system: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/byname/credential/check", nil); r.json(t)["ok"] != false || !strings.Contains(string(r.body), "network policy") {
		t.Fatalf("check: %s", r.body)
	}
	if n := strings.Count(e.srv.Log(), "Connection from"); n != conns {
		t.Fatalf("a denied dial reached sshd (%d new connections)", n-conns)
	}
}

// TestSystemCiphersNegotiated: a system's cipher and kex lists are what the client offers. Against
// an sshd that only speaks aes256-ctr and curve25519-sha256, a system offering only AES-GCM is
// refused with a 502 naming the negotiation (at once, not retried until the deadline), and the
// matching lists work.
func TestSystemCiphersNegotiated(t *testing.T) {
	e := newEnv(t)
	srv := sshtest.New(t, sshtest.Options{ExtraConfig: "Ciphers aes256-ctr\nKexAlgorithms curve25519-sha256"})
	e.registerWith("alice", "strict", srv, "", map[string]any{"ciphers": []string{"aes128-gcm@openssh.com"}})
	start := time.Now()
	r := e.do("alice", "POST", "/v1/systems/strict/commands", map[string]any{"command": "true"})
	if m := r.json(t); r.status != 502 || m["title"] != "SSH algorithm negotiation failed" || time.Since(start) > 10*time.Second {
		t.Fatalf("mismatched ciphers: %d %s after %s", r.status, r.body, time.Since(start))
	}
	if r := e.do("alice", "PATCH", "/v1/systems/strict", map[string]any{"ciphers": []string{"aes256-ctr"}, "kex": []string{"diffie-hellman-group14-sha256"}}); r.status != 200 {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/strict/commands", map[string]any{"command": "true"}); r.status != 502 {
		t.Fatalf("mismatched kex: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PATCH", "/v1/systems/strict", map[string]any{"kex": []string{"curve25519-sha256"}}); r.status != 200 {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/strict/commands", map[string]any{"command": "echo ok"}); r.status != 200 {
		t.Fatalf("matching lists: %d %s", r.status, r.body)
	}
}

// TestSystemWithoutSFTP: on a system whose sshd offers no SFTP subsystem, a file operation is
// answered at once with a 502 naming it (not retried until the deadline, not a 503), and
// commands on the system still run.
func TestSystemWithoutSFTP(t *testing.T) {
	e := newEnv(t)
	srv := sshtest.New(t, sshtest.Options{NoSFTP: true})
	e.registerWith("alice", "nosftp", srv, "", nil)
	for _, path := range []string{"/v1/systems/nosftp/ls/tmp", "/v1/systems/nosftp/stat/etc/hostname"} {
		r := e.do("alice", "GET", path, nil)
		if m := r.json(t); r.status != 502 || m["title"] != "SFTP unavailable on the system" {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	if r := e.do("alice", "POST", "/v1/systems/nosftp/commands", map[string]any{"command": "echo ok"}); r.status != 200 {
		t.Fatalf("command: %d %s", r.status, r.body)
	}
}
