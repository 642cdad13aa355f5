package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// withRounds returns an encrypted OpenSSH key whose header names the given bcrypt KDF rounds
// (the rest is a real key encrypted with 16 rounds: only the header matters for the cap).
func withRounds(t *testing.T, rounds uint32) string {
	t.Helper()
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKeyWithPassphrase(k, "", []byte("pass"))
	if err != nil {
		t.Fatal(err)
	}
	b := block.Bytes[len(openSSHKeyMagic):]
	off := 0
	for range 2 { // cipher name, KDF name
		off += 4 + int(binary.BigEndian.Uint32(b[off:]))
	}
	optsLen := int(binary.BigEndian.Uint32(b[off:]))
	binary.BigEndian.PutUint32(b[off+4+optsLen-4:], rounds) // the last field of the KDF options
	if got, ok := bcryptRounds(pem.EncodeToMemory(block)); !ok || got != uint64(rounds) {
		t.Fatalf("crafted key reads as %d rounds (%v)", got, ok)
	}
	return string(pem.EncodeToMemory(block))
}

// TestKeyParsingBounded: an encrypted key naming more KDF rounds than the cap is refused before
// any decryption, naming private_key; a key made by ssh-keygen with its default cost works; and
// when every key parsing slot is busy the request gets 503 with Retry-After instead of piling up.
func TestKeyParsingBounded(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")

	keyFile := filepath.Join(t.TempDir(), "id")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-a", "16", "-N", "pass", "-f", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	normal, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, passphrase string) resp {
		return e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": e.srv.User, "private_key": key, "passphrase": passphrase})
	}

	for _, tc := range []struct {
		name   string
		key    string
		status int
		detail string
	}{
		{"huge rounds", withRounds(t, 100000), 400, "100000 bcrypt KDF rounds; at most 128"},
		{"above the cap, below x/crypto's own", withRounds(t, 1000), 400, "1000 bcrypt KDF rounds; at most 128"},
		{"largest round count", withRounds(t, 1<<32-1), 400, "at most 128"},
		{"ssh-keygen -a 16", string(normal), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := put(tc.key, "pass")
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status == 400 {
				p := r.json(t)
				errs, _ := p["errors"].([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["field"] != "private_key" || !strings.Contains(p["detail"].(string), tc.detail) {
					t.Fatalf("problem %v, want private_key saying %q", p, tc.detail)
				}
			}
		})
	}

	t.Run("all slots busy", func(t *testing.T) {
		e.api.cfg.KeyParseWait = 20 * time.Millisecond
		for range cap(e.api.keySlots) {
			e.api.keySlots <- struct{}{} // every slot held, as by slow decryptions
		}
		r := put(string(normal), "pass")
		if r.status != 503 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("with every slot busy: %d %v %s", r.status, r.header, r.body)
		}
		for range cap(e.api.keySlots) {
			<-e.api.keySlots
		}
		if r := put(string(normal), "pass"); r.status != 200 {
			t.Fatalf("after the slots freed: %d %s", r.status, r.body)
		}
	})
}
