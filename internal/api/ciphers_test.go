package api

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

// TestCipherRoundTrip: a file uploaded and downloaded through a system registered with one
// cipher arrives byte for byte, for each cipher the per-cipher benchmark measures, against the
// distribution's sshd (OpenSSL's implementations at the other end). The patched x/crypto picks
// its fastest ChaCha20 keystream for this CPU (AVX-512, AVX2 through the AEAD, or package
// chacha20), so this checks that one against OpenSSH in both directions, on packets of every
// size an SFTP transfer sends.
func TestCipherRoundTrip(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	chownTree(t, dir, e.srv.User)
	payload := make([]byte, 3<<20+999)
	_, _ = rand.Read(payload)
	for _, cipher := range []string{"chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com", "aes256-ctr"} {
		t.Run(cipher, func(t *testing.T) {
			if r := e.do("alice", "PATCH", "/v1/systems/hpc", map[string]any{"ciphers": []string{cipher}}); r.status != 200 {
				t.Fatalf("set ciphers: %d %s", r.status, r.body)
			}
			url := "/v1/systems/hpc/content" + dir + "/" + cipher + ".bin"
			if r := e.do("alice", "PUT", url, string(payload)); r.status != 201 {
				t.Fatalf("upload: %d %s", r.status, r.body)
			}
			got, err := os.ReadFile(filepath.Join(dir, cipher+".bin"))
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("uploaded file: %d bytes, equal %v, %v", len(got), bytes.Equal(got, payload), err)
			}
			r := e.do("alice", "GET", url, nil)
			if r.status != 200 || !bytes.Equal(r.body, payload) {
				t.Fatalf("download: %d, %d bytes, equal %v", r.status, len(r.body), bytes.Equal(r.body, payload))
			}
			if r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo ok"}); r.status != 200 {
				t.Fatalf("command: %d %s", r.status, r.body)
			}
		})
	}
}
