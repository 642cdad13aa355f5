// Package secret seals credentials at rest with envelope encryption: each
// value is encrypted with a fresh AES-256-GCM data key, and that data key is
// wrapped by a long-lived master key (a key-encryption key, KEK) held in a
// Keyring. Master keys carry ids so they can be rotated: new values are sealed
// with the primary key while values sealed with older keys still open and can
// be moved to the primary key with Rewrap, which never touches the ciphertext.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// KeySize is the size in bytes of master keys and data keys (AES-256).
const KeySize = 32

// ErrDecrypt is wrapped by every error from Open and Rewrap that means the
// sealed value cannot be opened: unknown key id, wrong additional
// authenticated data, or tampering. Callers must not tell these apart to
// clients.
var ErrDecrypt = errors.New("secret: cannot decrypt sealed value")

// Sealed is an encrypted value as it is stored. It holds no secret in the
// clear: the data key is wrapped by the master key named by KeyID.
type Sealed struct {
	// KeyID names the master key that wrapped the data key.
	KeyID string
	// WrappedKey is the data key encrypted with the master key (GCM nonce
	// prepended).
	WrappedKey []byte
	// Ciphertext is the plaintext encrypted with the data key (GCM nonce
	// prepended).
	Ciphertext []byte
}

// Keyring holds the master keys by id and seals new values with the primary
// one. It is immutable after NewKeyring and safe for concurrent use.
type Keyring struct {
	primary string
	keys    map[string]cipher.AEAD
}

// NewKeyring returns a Keyring over keys (id to 32-byte master key) whose
// primary key, used for every new Seal and Rewrap, is keys[primary]. The key
// bytes are copied into AES ciphers; the caller may clear its map afterwards.
func NewKeyring(primary string, keys map[string][]byte) (*Keyring, error) {
	if _, ok := keys[primary]; !ok {
		return nil, fmt.Errorf("secret: primary key %q is not in the keyring", primary)
	}
	k := &Keyring{primary: primary, keys: make(map[string]cipher.AEAD, len(keys))}
	// Sorted so that the first bad key reported is deterministic.
	for _, id := range slices.Sorted(maps.Keys(keys)) {
		if id == "" || strings.ContainsAny(id, ":\n\r\t ") {
			return nil, fmt.Errorf("secret: invalid key id %q", id)
		}
		if len(keys[id]) != KeySize {
			return nil, fmt.Errorf("secret: key %q is %d bytes, want %d", id, len(keys[id]), KeySize)
		}
		aead, err := newGCM(keys[id])
		if err != nil {
			return nil, fmt.Errorf("secret: key %q: %w", id, err)
		}
		k.keys[id] = aead
	}
	return k, nil
}

// PrimaryID returns the id of the key used for new seals. A Sealed whose
// KeyID differs from it is a candidate for Rewrap.
func (k *Keyring) PrimaryID() string { return k.primary }

// Seal encrypts plaintext under a fresh data key wrapped by the primary
// master key. aad (for example owner and system id) is authenticated by both
// encryptions, so the result opens only with the same aad.
func (k *Keyring) Seal(plaintext, aad []byte) (Sealed, error) {
	dek := make([]byte, KeySize)
	defer clear(dek)
	if _, err := rand.Read(dek); err != nil {
		return Sealed{}, fmt.Errorf("secret: generate data key: %w", err)
	}
	data, err := newGCM(dek)
	if err != nil {
		return Sealed{}, fmt.Errorf("secret: data key cipher: %w", err)
	}
	ciphertext, err := seal(data, plaintext, aad)
	if err != nil {
		return Sealed{}, err
	}
	wrapped, err := seal(k.keys[k.primary], dek, aad)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{KeyID: k.primary, WrappedKey: wrapped, Ciphertext: ciphertext}, nil
}

// Open decrypts s with the master key it names and the same aad given to
// Seal. Any failure wraps ErrDecrypt.
func (k *Keyring) Open(s Sealed, aad []byte) ([]byte, error) {
	dek, err := k.unwrap(s, aad)
	if err != nil {
		return nil, err
	}
	defer clear(dek)
	data, err := newGCM(dek)
	if err != nil {
		return nil, fmt.Errorf("%w: data key: %w", ErrDecrypt, err)
	}
	plaintext, err := open(data, s.Ciphertext, aad)
	if err != nil {
		return nil, fmt.Errorf("%w: ciphertext: %w", ErrDecrypt, err)
	}
	return plaintext, nil
}

// Rewrap returns s with its data key re-encrypted under the primary master
// key; the ciphertext is kept as is. It first opens s fully, so a value that
// does not authenticate with aad is refused (wrapping ErrDecrypt) rather than
// carried forward. A value already under the primary key is returned
// unchanged after that check.
func (k *Keyring) Rewrap(s Sealed, aad []byte) (Sealed, error) {
	plaintext, err := k.Open(s, aad)
	if err != nil {
		return Sealed{}, err
	}
	clear(plaintext)
	if s.KeyID == k.primary {
		return s, nil
	}
	dek, err := k.unwrap(s, aad)
	if err != nil {
		return Sealed{}, err
	}
	defer clear(dek)
	wrapped, err := seal(k.keys[k.primary], dek, aad)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{
		KeyID:      k.primary,
		WrappedKey: wrapped,
		Ciphertext: append([]byte(nil), s.Ciphertext...),
	}, nil
}

// unwrap decrypts the data key of s with the master key it names.
func (k *Keyring) unwrap(s Sealed, aad []byte) ([]byte, error) {
	kek, ok := k.keys[s.KeyID]
	if !ok {
		return nil, fmt.Errorf("%w: unknown key id %q", ErrDecrypt, s.KeyID)
	}
	dek, err := open(kek, s.WrappedKey, aad)
	if err != nil {
		return nil, fmt.Errorf("%w: wrapped key: %w", ErrDecrypt, err)
	}
	if len(dek) != KeySize {
		clear(dek)
		return nil, fmt.Errorf("%w: wrapped key has wrong size", ErrDecrypt)
	}
	return dek, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	return aead, nil
}

// seal encrypts plaintext with a random nonce and returns nonce||ciphertext.
func seal(aead cipher.AEAD, plaintext, aad []byte) ([]byte, error) {
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("secret: generate nonce: %w", err)
	}
	return aead.Seal(out, out, plaintext, aad), nil
}

// open reverses seal.
func open(aead cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, errors.New("too short")
	}
	nonce, body := sealed[:aead.NonceSize()], sealed[aead.NonceSize():]
	plaintext, err := aead.Open(nil, nonce, body, aad)
	if err != nil {
		return nil, fmt.Errorf("authentication failed: %w", err)
	}
	return plaintext, nil
}
