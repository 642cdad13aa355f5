package secret

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreateKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	path := filepath.Join(dir, "master.key")

	id, key, err := LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != KeySize || id != KeyID(key) || len(id) != 8 {
		t.Fatalf("created key: id %q, %d bytes", id, len(key))
	}
	for p, want := range map[string]os.FileMode{path: 0o600, dir: 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %04o, want %04o", p, fi.Mode().Perm(), want)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), id+":") || strings.Count(string(raw), "\n") != 1 {
		t.Fatalf("key file is not one <id>:<base64> line: %q", raw)
	}

	id2, key2, err := LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if id2 != id || !bytes.Equal(key2, key) {
		t.Fatal("reloaded key differs from the created one")
	}
	if ring, err := NewKeyring(id, map[string][]byte{id: key}); err != nil || ring.PrimaryID() != id {
		t.Fatalf("key file key is not usable in a keyring: %v", err)
	}
}

func TestLoadOrCreateKeyFileConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "master.key")
	const n = 8
	keys := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, keys[i], errs[i] = LoadOrCreateKeyFile(path) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatal("concurrent creators got different keys")
		}
	}
}

func TestLoadKeyFileRejects(t *testing.T) {
	const valid = "abcd1234:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"group readable", valid, 0o640, "chmod 600"},
		{"world readable", valid, 0o604, "chmod 600"},
		{"no id", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n", 0o600, "<id>:<base64 key>"},
		{"not base64", "id:!!!\n", 0o600, "not base64"},
		{"short key", "id:AAAA\n", 0o600, "3 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "master.key")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadOrCreateKeyFile(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
			after, _ := os.ReadFile(path)
			if string(after) != tt.content {
				t.Fatal("a refused key file was modified")
			}
		})
	}
}

func TestLoadOrCreateSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "jwt.secret")
	s, err := LoadOrCreateSecretFile(path, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 32 {
		t.Fatalf("secret is %d bytes, want 32", len(s))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %04o, want 0600", fi.Mode().Perm())
	}
	again, err := LoadOrCreateSecretFile(path, 32)
	if err != nil || !bytes.Equal(again, s) {
		t.Fatalf("reload = %v; equal %v", err, bytes.Equal(again, s))
	}
	if _, err := LoadOrCreateSecretFile(path, 64); err == nil || !strings.Contains(err.Error(), "at least 64") {
		t.Fatalf("too-short existing secret: error = %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateSecretFile(path, 32); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable secret file: error = %v", err)
	}
}
