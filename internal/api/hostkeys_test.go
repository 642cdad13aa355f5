package api

import (
	"bytes"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"github.com/sshapi/sshapi/internal/access"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// keyscan runs OpenSSH's ssh-keyscan against srv, as the README's quickstart does.
func keyscan(t *testing.T, srv *sshtest.Server, args ...string) string {
	t.Helper()
	args = append(args, "-p", strconv.Itoa(srv.Port), srv.Host)
	out, err := exec.Command("ssh-keyscan", args...).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		t.Fatalf("ssh-keyscan %v: %v: %q", args, err, out)
	}
	return string(out)
}

// quickstart walks the README's flow for a system registered with the given host-key fields:
// register, credential, check, command, ls, upload, download.
func (e *env) quickstart(t *testing.T, srv *sshtest.Server, id string, hostKeyFields map[string]any) {
	t.Helper()
	body := map[string]any{"id": id, "host": srv.Host, "port": srv.Port}
	for k, v := range hostKeyFields {
		body[k] = v
	}
	if r := e.do("alice", "POST", "/v1/systems", body); r.status != 201 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)}); r.status != 200 {
		t.Fatalf("credential: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/"+id+"/credential/check", nil); r.status != 200 || r.json(t)["ok"] != true {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	r := e.do("alice", "POST", "/v1/systems/"+id+"/commands", map[string]any{"command": "id -un", "timeout_s": 10})
	if r.status != 200 || strings.TrimSpace(fmt.Sprint(r.json(t)["stdout"])) != srv.User {
		t.Fatalf("command: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", "/v1/systems/"+id+"/ls/~", nil); r.status != 200 {
		t.Fatalf("ls: %d %s", r.status, r.body)
	}
	dir := srv.MkTemp(t)
	payload := "quickstart " + id + "\n"
	path := "/v1/systems/" + id + "/content" + dir + "/up.txt"
	if r := e.do("alice", "PUT", path, payload); r.status != 201 && r.status != 200 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", path, nil); r.status != 200 || string(r.body) != payload {
		t.Fatalf("download: %d %q", r.status, r.body)
	}
}

// TestQuickstartAgainstDistributionDefaultSSHD: a server with RSA, ECDSA and Ed25519 host keys
// (PAM, external sftp-server), registered every way a user may register it.
func TestQuickstartAgainstDistributionDefaultSSHD(t *testing.T) {
	e := newEnv(t)
	srv := e.srv
	if len(srv.HostKeys) != 3 {
		t.Fatalf("test sshd has %d host keys, want RSA, ECDSA and Ed25519", len(srv.HostKeys))
	}
	scanEd := keyscan(t, srv, "-t", "ed25519")
	scanAll := keyscan(t, srv)
	hashed := keyscan(t, srv, "-H")
	rsa := srv.AuthorizedHostKeyOf(ssh.KeyAlgoRSA)
	ecdsa := srv.AuthorizedHostKeyOf(ssh.KeyAlgoECDSA256)
	rsaPub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(rsa))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		fields map[string]any
	}{
		// The README's quickstart: ssh-keyscan -t ed25519 with the host field cut off.
		{"keyscan-ed25519-cut", map[string]any{"host_keys": []string{strings.SplitN(strings.TrimSpace(scanEd), " ", 2)[1]}}},
		{"keyscan-ed25519-line", map[string]any{"host_keys": []string{scanEd}}},
		{"keyscan-all-one-entry", map[string]any{"host_keys": []string{scanAll}}},
		{"keyscan-hashed", map[string]any{"host_keys": []string{hashed}}},
		{"rsa-only", map[string]any{"host_keys": []string{rsa}}},
		{"ecdsa-only", map[string]any{"host_keys": []string{ecdsa}}},
		// Only the RSA fingerprint: the client prefers Ed25519, sees a mismatch and moves on.
		{"rsa-fingerprint-only", map[string]any{"host_key_fingerprints": []string{ssh.FingerprintSHA256(rsaPub)}}},
		{"trust-on-first-use", map[string]any{"trust_on_first_use": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { e.quickstart(t, srv, tc.name, tc.fields) })
	}
	// Registered host keys are stored canonically: no host field, no comment.
	m := e.do("alice", "GET", "/v1/systems/keyscan-all-one-entry", nil).json(t)
	if keys := m["host_keys"].([]any); len(keys) != 3 || strings.HasPrefix(keys[0].(string), "[") {
		t.Fatalf("stored host_keys %v, want three canonical keys", keys)
	}
}

// TestQuickstartAgainstHostCertificates: a server whose host keys are signed by a CA, registered
// by its @cert-authority line (with and without host patterns).
func TestQuickstartAgainstHostCertificates(t *testing.T) {
	e := newEnv(t)
	srv := sshtest.New(t, sshtest.Options{HostCertificates: true})
	ca := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(srv.HostCA)))
	e.quickstart(t, srv, "ca", map[string]any{"host_keys": []string{"@cert-authority " + ca}})
	e.quickstart(t, srv, "ca-pattern", map[string]any{"host_keys": []string{"@cert-authority [127.0.0.*]:*,login.example.org " + ca}})

	// A CA whose patterns do not cover the host does not vouch for it: no key registered applies.
	r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "ca-elsewhere", "host": srv.Host, "port": srv.Port,
		"host_keys": []string{"@cert-authority *.example.org " + ca}})
	if r.status != 201 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	e.do("alice", "PUT", "/v1/systems/ca-elsewhere/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)})
	if r := e.do("alice", "POST", "/v1/systems/ca-elsewhere/commands", map[string]any{"command": "true"}); r.status < 400 {
		t.Fatalf("a CA scoped to other hosts was trusted: %d %s", r.status, r.body)
	}
	// A different CA is refused with both sides named.
	other, _ := sshtest.NewPrivateKey("ed25519", 0)
	otherSigner, _ := ssh.NewSignerFromSigner(other)
	otherCA := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(otherSigner.PublicKey())))
	e.do("alice", "POST", "/v1/systems", map[string]any{"id": "wrong-ca", "host": srv.Host, "port": srv.Port, "host_keys": []string{"@cert-authority " + otherCA}})
	e.do("alice", "PUT", "/v1/systems/wrong-ca/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)})
	r = e.do("alice", "POST", "/v1/systems/wrong-ca/commands", map[string]any{"command": "true"})
	if m := r.json(t); r.status != 502 || m["title"] != "SSH host key mismatch" || !strings.Contains(m["detail"].(string), ssh.FingerprintSHA256(otherSigner.PublicKey())) {
		t.Fatalf("wrong CA: %d %s", r.status, r.body)
	}
}

func TestHostKeysValidation(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"garbage", []string{"not a key"}},
		{"empty-entry", []string{"# only a comment\n\n"}},
		{"unknown-marker", []string{"@trusted ssh-ed25519 " + strings.Fields(e.srv.AuthorizedHostKey())[1]}},
	} {
		r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": tc.name, "host": "127.0.0.1", "host_keys": tc.keys})
		if m := r.json(t); r.status != 400 || !strings.Contains(string(r.body), `"field":"host_keys"`) {
			t.Errorf("%s: %d %v", tc.name, r.status, m)
		}
	}
	// A @revoked key is never accepted, even when its fingerprint is registered.
	ed := e.srv.AuthorizedHostKey()
	e.quickstartRefused(t, "revoked", map[string]any{"host_keys": []string{"@revoked " + ed}, "host_key_fingerprints": []string{ssh.FingerprintSHA256(e.srv.HostKey)}})
}

func (e *env) quickstartRefused(t *testing.T, id string, fields map[string]any) {
	t.Helper()
	body := map[string]any{"id": id, "host": e.srv.Host, "port": e.srv.Port}
	for k, v := range fields {
		body[k] = v
	}
	if r := e.do("alice", "POST", "/v1/systems", body); r.status != 201 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	e.do("alice", "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)})
	if r := e.do("alice", "POST", "/v1/systems/"+id+"/commands", map[string]any{"command": "true"}); r.status != 502 {
		t.Fatalf("%s: %d %s, want 502", id, r.status, r.body)
	}
}

// TestTOFUKeySwapRefused: after a key is pinned on first use, a server presenting other keys
// is refused (502 naming both fingerprints), the pin stays, and the credential is never offered.
func TestTOFUKeySwapRefused(t *testing.T) {
	e := newEnv(t)
	srv := sshtest.New(t, sshtest.Options{})
	e.quickstart(t, srv, "tofu", map[string]any{"trust_on_first_use": true})
	pinned := e.do("alice", "GET", "/v1/systems/tofu", nil).json(t)["host_keys"].([]any)
	if len(pinned) != 1 || pinned[0] != srv.AuthorizedHostKey() {
		t.Fatalf("pinned %v, want the Ed25519 key %s", pinned, srv.AuthorizedHostKey())
	}
	oldFP := ssh.FingerprintSHA256(srv.HostKey)
	if err := srv.RotateHostKeys(t.Context()); err != nil {
		t.Fatal(err)
	}
	logBefore := len(srv.Log())
	dir := srv.MkTemp(t)
	var r resp
	// The old pooled connection died with the restart; retry until the pool re-dials.
	for i := 0; i < 20; i++ {
		r = e.do("alice", "PUT", "/v1/systems/tofu/content"+dir+"/leak.txt", "must not arrive")
		if r.status == 502 {
			break
		}
	}
	m := r.json(t)
	if r.status != 502 || m["title"] != "SSH host key mismatch" ||
		!strings.Contains(fmt.Sprint(m["detail"]), oldFP) || !strings.Contains(fmt.Sprint(m["detail"]), ssh.FingerprintSHA256(srv.HostKey)) {
		t.Fatalf("after a key swap: %d %s, want 502 naming %s and the new key", r.status, r.body, oldFP)
	}
	if got := e.do("alice", "GET", "/v1/systems/tofu", nil).json(t)["host_keys"].([]any); len(got) != 1 || got[0] != pinned[0] {
		t.Fatalf("pin changed to %v", got)
	}
	if after := srv.Log()[logBefore:]; strings.Contains(after, "Accepted publickey") || strings.Contains(after, "Failed publickey") {
		t.Fatalf("credential offered to the swapped server:\n%s", after)
	}
	if out, _ := exec.Command("ls", dir).Output(); len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("bytes reached the swapped server: %s", out)
	}
}

// TestTOFUConcurrentFirstConnections: many first connections at once pin exactly one key, and a
// connection racing the pin with another key is refused.
func TestTOFUConcurrentFirstConnections(t *testing.T) {
	e := newEnv(t)
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "race", "host": e.srv.Host, "port": e.srv.Port, "trust_on_first_use": true}); r.status != 201 {
		t.Fatal(string(r.body))
	}
	e.do("alice", "PUT", "/v1/systems/race/credential", map[string]any{"username": e.srv.User, "private_key": string(e.srv.PrivateKeyPEM)})
	var wg sync.WaitGroup
	statuses := make(chan int, 30)
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- e.do("alice", "POST", "/v1/systems/race/commands", map[string]any{"command": "true"}).status
		}()
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 200 {
			t.Errorf("concurrent first command: %d", s)
		}
	}
	if keys := e.do("alice", "GET", "/v1/systems/race", nil).json(t)["host_keys"].([]any); len(keys) != 1 {
		t.Fatalf("pinned %v, want one key", keys)
	}

	// Two first connections presenting different keys (as an attacker racing the real server
	// would): exactly one pins, the other is refused.
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "race2", "host": e.srv.Host, "port": e.srv.Port, "trust_on_first_use": true}); r.status != 201 {
		t.Fatal(string(r.body))
	}
	var errs [2]error
	keys := [2]ssh.PublicKey{e.srv.HostKeys[0], e.srv.HostKeys[2]}
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = e.api.access.LearnHostKey("alice", "race2", keys[i]) }()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("learnHostKey results %v, want exactly one success", errs)
	}
	var hk *sshpool.HostKeyError
	for _, err := range errs {
		if err != nil && !asHostKeyError(err, &hk) {
			t.Fatalf("the losing key got %v, want a host key error", err)
		}
	}
}

func asHostKeyError(err error, hk **sshpool.HostKeyError) bool {
	e, ok := err.(*sshpool.HostKeyError)
	*hk = e
	return ok
}

// TestPatchNotLostToPin: a PATCH racing a first-use pin keeps both changes.
func TestPatchNotLostToPin(t *testing.T) {
	e := newEnv(t)
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "p", "host": e.srv.Host, "port": e.srv.Port, "trust_on_first_use": true}); r.status != 201 {
		t.Fatal(string(r.body))
	}
	if err := e.api.access.LearnHostKey("alice", "p", e.srv.HostKey); err != nil {
		t.Fatal(err)
	}
	if r := e.do("alice", "PATCH", "/v1/systems/p", map[string]any{"description": "patched"}); r.status != 200 {
		t.Fatal(string(r.body))
	}
	m := e.do("alice", "GET", "/v1/systems/p", nil).json(t)
	if m["description"] != "patched" || len(m["host_keys"].([]any)) != 1 {
		t.Fatalf("after pin + patch: %v", m)
	}
}

// TestHashedKnownHostsPatterns checks @cert-authority host patterns as OpenSSH matches them.
func TestHashedKnownHostsPatterns(t *testing.T) {
	e := newEnv(t)
	addr := net.JoinHostPort(e.srv.Host, strconv.Itoa(e.srv.Port))
	line := knownhosts.Line([]string{knownhosts.HashHostname(knownhosts.Normalize(addr))}, e.srv.HostKey)
	e.quickstart(t, e.srv, "hashed-line", map[string]any{"host_keys": []string{line}})
}

// TestUserKeysAsCentresIssueThem: RSA (signed with rsa-sha2-* against a server that refuses
// SHA-1), ECDSA, Ed25519, encrypted keys and OpenSSH user certificates.
func TestUserKeysAsCentresIssueThem(t *testing.T) {
	caKey, err := sshtest.NewPrivateKey("ed25519", 0)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := ssh.NewSignerFromSigner(caKey)
	e := newEnv(t)
	srv := sshtest.New(t, sshtest.Options{TrustedUserCAKeys: []ssh.PublicKey{ca.PublicKey()},
		ExtraConfig: "PubkeyAcceptedAlgorithms -ssh-rsa,ssh-rsa-cert-v01@openssh.com"})
	if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "hpc", "host": srv.Host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}}); r.status != 201 {
		t.Fatal(string(r.body))
	}
	certFor := func(pub ssh.PublicKey, principals []string, after, before time.Time) string {
		c := &ssh.Certificate{Key: pub, CertType: ssh.UserCert, KeyId: "test", ValidPrincipals: principals,
			ValidAfter: uint64(after.Unix()), ValidBefore: uint64(before.Unix()),
			Permissions: ssh.Permissions{Extensions: map[string]string{"permit-pty": ""}}}
		if err := c.SignCert(rand.Reader, ca); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(c)))
	}
	type keyCase struct {
		name, typ  string
		bits       int
		passphrase string
		cert       func(ssh.PublicKey) string
		authorize  bool
		wantStatus int // of PUT credential
		wantField  string
	}
	now := time.Now()
	cases := []keyCase{
		{name: "rsa-2048", typ: "rsa", bits: 2048, authorize: true, wantStatus: 200},
		{name: "rsa-4096", typ: "rsa", bits: 4096, authorize: true, wantStatus: 200},
		{name: "ecdsa", typ: "ecdsa", authorize: true, wantStatus: 200},
		{name: "ed25519", typ: "ed25519", authorize: true, wantStatus: 200},
		{name: "ed25519-encrypted", typ: "ed25519", passphrase: "correct horse", authorize: true, wantStatus: 200},
		{name: "rsa-encrypted", typ: "rsa", bits: 2048, passphrase: "correct horse", authorize: true, wantStatus: 200},
		{name: "ed25519-cert", typ: "ed25519", wantStatus: 200, cert: func(p ssh.PublicKey) string {
			return certFor(p, []string{srv.User}, now.Add(-time.Hour), now.Add(time.Hour))
		}},
		{name: "rsa-cert", typ: "rsa", bits: 2048, wantStatus: 200, cert: func(p ssh.PublicKey) string {
			return certFor(p, []string{srv.User}, now.Add(-time.Hour), now.Add(time.Hour))
		}},
		{name: "rsa-1024", typ: "rsa", bits: 1024, wantStatus: 400, wantField: "private_key"},
		{name: "cert-expired", typ: "ed25519", wantStatus: 400, wantField: "certificate", cert: func(p ssh.PublicKey) string {
			return certFor(p, []string{srv.User}, now.Add(-2*time.Hour), now.Add(-time.Hour))
		}},
		{name: "cert-wrong-principal", typ: "ed25519", wantStatus: 400, wantField: "certificate", cert: func(p ssh.PublicKey) string {
			return certFor(p, []string{"someone-else"}, now.Add(-time.Hour), now.Add(time.Hour))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			priv, err := sshtest.NewPrivateKey(tc.typ, tc.bits)
			if err != nil {
				t.Fatal(err)
			}
			var block *pem.Block
			if tc.passphrase != "" {
				block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte(tc.passphrase))
			} else {
				block, err = ssh.MarshalPrivateKey(priv, "")
			}
			if err != nil {
				t.Fatal(err)
			}
			signer, _ := ssh.NewSignerFromSigner(priv)
			if tc.authorize {
				if err := srv.AuthorizeKey(signer.PublicKey()); err != nil {
					t.Fatal(err)
				}
			}
			body := map[string]any{"username": srv.User, "private_key": string(pem.EncodeToMemory(block)), "passphrase": tc.passphrase}
			if tc.cert != nil {
				body["certificate"] = tc.cert(signer.PublicKey())
			}
			r := e.do("alice", "PUT", "/v1/systems/hpc/credential", body)
			if r.status != tc.wantStatus {
				t.Fatalf("PUT credential: %d %s, want %d", r.status, r.body, tc.wantStatus)
			}
			if tc.wantStatus != 200 {
				if !strings.Contains(string(r.body), `"field":"`+tc.wantField+`"`) {
					t.Fatalf("error does not name %s: %s", tc.wantField, r.body)
				}
				return
			}
			r = e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "id -un", "timeout_s": 10})
			if r.status != 200 || strings.TrimSpace(fmt.Sprint(r.json(t)["stdout"])) != srv.User {
				t.Fatalf("command with %s: %d %s", tc.name, r.status, r.body)
			}
		})
	}
	// The server refuses ssh-rsa (SHA-1) signatures, so the RSA logins above used rsa-sha2-*.
}

// TestCertificateExpiringAfterUpload: a certificate valid when stored but expired later is a
// clear 502 at once (no dial, no hang).
func TestCertificateExpiringAfterUpload(t *testing.T) {
	caKey, _ := sshtest.NewPrivateKey("ed25519", 0)
	ca, _ := ssh.NewSignerFromSigner(caKey)
	e := newEnv(t)
	srv := sshtest.New(t, sshtest.Options{TrustedUserCAKeys: []ssh.PublicKey{ca.PublicKey()}})
	priv, _ := sshtest.NewPrivateKey("ed25519", 0)
	signer, _ := ssh.NewSignerFromSigner(priv)
	expiry := time.Now().Add(2 * time.Second)
	c := &ssh.Certificate{Key: signer.PublicKey(), CertType: ssh.UserCert, KeyId: "short", ValidPrincipals: []string{srv.User},
		ValidAfter: uint64(time.Now().Add(-time.Minute).Unix()), ValidBefore: uint64(expiry.Unix())}
	if err := c.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	block, _ := ssh.MarshalPrivateKey(priv, "")
	e.do("alice", "POST", "/v1/systems", map[string]any{"id": "hpc", "host": srv.Host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}})
	if r := e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": srv.User,
		"private_key": string(pem.EncodeToMemory(block)), "certificate": string(ssh.MarshalAuthorizedKey(c))}); r.status != 200 {
		t.Fatalf("PUT credential: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}); r.status != 200 {
		t.Fatalf("command before expiry: %d %s", r.status, r.body)
	}
	e.pool.Forget(access.PoolSystem("alice", "hpc"))
	for time.Now().Before(expiry.Add(time.Second)) { // the certificate's clock, in whole seconds
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"})
	if m := r.json(t); r.status != 502 || !strings.Contains(fmt.Sprint(m["detail"]), "expired") {
		t.Fatalf("command after expiry: %d %s", r.status, r.body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("expired certificate took %s to fail", d)
	}
}
