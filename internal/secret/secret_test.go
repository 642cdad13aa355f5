package secret

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
)

func randomKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k1, k2 := randomKey(t), randomKey(t)
	ring, err := NewKeyring("k1", map[string][]byte{"k1": k1})
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewKeyring("k1", map[string][]byte{"k1": k2})
	if err != nil {
		t.Fatal(err)
	}
	plaintext := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
	aad := []byte("alice\x00cluster")

	tests := []struct {
		name   string
		ring   *Keyring
		mutate func(s *Sealed)
		aad    []byte
		ok     bool
	}{
		{name: "round trip", ring: ring, mutate: func(*Sealed) {}, aad: aad, ok: true},
		{name: "wrong aad (other owner)", ring: ring, mutate: func(*Sealed) {}, aad: []byte("bob\x00cluster")},
		{name: "empty aad", ring: ring, mutate: func(*Sealed) {}, aad: nil},
		{name: "tampered ciphertext", ring: ring, mutate: func(s *Sealed) { s.Ciphertext[len(s.Ciphertext)-1] ^= 1 }, aad: aad},
		{name: "tampered nonce", ring: ring, mutate: func(s *Sealed) { s.Ciphertext[0] ^= 1 }, aad: aad},
		{name: "tampered wrapped key", ring: ring, mutate: func(s *Sealed) { s.WrappedKey[20] ^= 1 }, aad: aad},
		{name: "truncated ciphertext", ring: ring, mutate: func(s *Sealed) { s.Ciphertext = s.Ciphertext[:10] }, aad: aad},
		{name: "unknown key id", ring: ring, mutate: func(s *Sealed) { s.KeyID = "nope" }, aad: aad},
		{name: "same id, different key", ring: other, mutate: func(*Sealed) {}, aad: aad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ring.Seal(plaintext, aad)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(s.Ciphertext, plaintext) || bytes.Contains(s.WrappedKey, k1) {
				t.Fatal("sealed value contains plaintext or key")
			}
			tt.mutate(&s)
			got, err := tt.ring.Open(s, tt.aad)
			if tt.ok {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if !bytes.Equal(got, plaintext) {
					t.Fatalf("Open = %q, want %q", got, plaintext)
				}
				return
			}
			if !errors.Is(err, ErrDecrypt) {
				t.Fatalf("Open error = %v, want ErrDecrypt", err)
			}
			if got != nil {
				t.Fatal("Open returned plaintext with an error")
			}
		})
	}
}

func TestSealIsRandomized(t *testing.T) {
	ring, err := NewKeyring("k1", map[string][]byte{"k1": randomKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ring.Seal([]byte("same"), nil)
	b, _ := ring.Seal([]byte("same"), nil)
	if bytes.Equal(a.Ciphertext, b.Ciphertext) || bytes.Equal(a.WrappedKey, b.WrappedKey) {
		t.Fatal("two seals of the same plaintext are identical; data keys or nonces are reused")
	}
}

func TestRotation(t *testing.T) {
	k1, k2 := randomKey(t), randomKey(t)
	old, err := NewKeyring("k1", map[string][]byte{"k1": k1})
	if err != nil {
		t.Fatal(err)
	}
	aad := []byte("alice\x00cluster")
	s1, err := old.Seal([]byte("private key"), aad)
	if err != nil {
		t.Fatal(err)
	}

	rotated, err := NewKeyring("k2", map[string][]byte{"k1": k1, "k2": k2})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Open(s1, aad); err != nil || string(got) != "private key" {
		t.Fatalf("open old value after rotation = %q, %v", got, err)
	}
	if s, _ := rotated.Seal([]byte("x"), aad); s.KeyID != "k2" {
		t.Fatalf("new seal uses key %q, want k2", s.KeyID)
	}

	if _, err := rotated.Rewrap(s1, []byte("bob\x00cluster")); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("Rewrap with wrong aad = %v, want ErrDecrypt", err)
	}
	s2, err := rotated.Rewrap(s1, aad)
	if err != nil {
		t.Fatal(err)
	}
	if s2.KeyID != "k2" {
		t.Fatalf("rewrapped KeyID = %q, want k2", s2.KeyID)
	}
	if !bytes.Equal(s2.Ciphertext, s1.Ciphertext) {
		t.Fatal("Rewrap changed the ciphertext; only the data key should be rewrapped")
	}

	// Once k1 is retired, only the rewrapped value still opens.
	retired, err := NewKeyring("k2", map[string][]byte{"k2": k2})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := retired.Open(s2, aad); err != nil || string(got) != "private key" {
		t.Fatalf("open rewrapped value = %q, %v", got, err)
	}
	if _, err := retired.Open(s1, aad); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("open value under retired key = %v, want ErrDecrypt", err)
	}
	s3, err := retired.Rewrap(s2, aad)
	if err != nil || s3.KeyID != "k2" || !bytes.Equal(s3.WrappedKey, s2.WrappedKey) {
		t.Fatalf("Rewrap of a value already under the primary key changed it: %v", err)
	}
}

func TestNewKeyringRejects(t *testing.T) {
	good := randomKey(t)
	tests := []struct {
		name    string
		primary string
		keys    map[string][]byte
		want    string
	}{
		{"primary missing", "k2", map[string][]byte{"k1": good}, "primary"},
		{"short key", "k1", map[string][]byte{"k1": good[:16]}, "16 bytes"},
		{"empty id", "k1", map[string][]byte{"k1": good, "": good}, "invalid key id"},
		{"id with colon", "k1", map[string][]byte{"k1": good, "a:b": good}, "invalid key id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKeyring(tt.primary, tt.keys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewKeyring error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
