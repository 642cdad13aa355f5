package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/slot"
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
		var held []*slot.Lease
		for i := range e.api.keySlots.Capacity() { // every slot held, as by slow decryptions of others
			l, err := e.api.keySlots.TryAcquire(fmt.Sprint("other", i), 1)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		r := put(string(normal), "pass")
		if r.status != 503 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("with every slot busy: %d %v %s", r.status, r.header, r.body)
		}
		for _, l := range held {
			l.Release()
		}
		if r := put(string(normal), "pass"); r.status != 200 {
			t.Fatalf("after the slots freed: %d %s", r.status, r.body)
		}
	})
}

// TestKeyParsingPerOwnerShare: bob keeping a dozen expensive key decryptions (128 KDF rounds,
// the cap) in flight uses only his share of the key parsing slots, so alice's ordinary PUT
// …/credential is served at once instead of queuing behind his and failing with 503.
func TestKeyParsingPerOwnerShare(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	e.register("bob", "bhpc")
	e.api.cfg.KeyParseWait = 2 * time.Second

	keygen := func(rounds string) string {
		f := filepath.Join(t.TempDir(), "id")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-a", rounds, "-N", "pass", "-f", f).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	slow, normal := keygen("128"), keygen("16")

	var wg sync.WaitGroup
	var bobBusy atomic.Int32
	for range 12 {
		wg.Go(func() {
			r := e.do("bob", "PUT", "/v1/systems/bhpc/credential", map[string]any{"username": e.srv.User, "private_key": slow, "passphrase": "pass"})
			if r.status == 503 {
				bobBusy.Add(1)
			} else if r.status != 200 {
				t.Errorf("bob: %d %s", r.status, r.body)
			}
		})
	}
	defer wg.Wait()
	time.Sleep(300 * time.Millisecond) // bob's requests are decrypting or waiting
	start := time.Now()
	r := e.do("alice", "PUT", "/v1/systems/hpc/credential", map[string]any{"username": e.srv.User, "private_key": normal, "passphrase": "pass"})
	took := time.Since(start)
	if r.status != 200 {
		t.Fatalf("alice while bob saturates his share: %d %s (after %v)", r.status, r.body, took)
	}
	wg.Wait()
	t.Logf("alice's PUT: %v; bob's PUTs refused with 503: %d of 12", took, bobBusy.Load())
}
