package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxSecretFileSize bounds what is read from a key or secret file.
const maxSecretFileSize = 64 << 10

// KeyID returns the default id of a master key: the first 8 hex characters
// of its SHA-256. It identifies the key without revealing it.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// LoadOrCreateKeyFile returns the master key stored at path in the form
// "<id>:<base64 key>" (one line). If the file does not exist it creates it
// with a fresh random 32-byte key, id KeyID(key), mode 0600, creating the
// directory with mode 0700 if needed. Creation is atomic: concurrent callers
// end up with the same key. A key file that group or others may access is
// refused.
func LoadOrCreateKeyFile(path string) (id string, key []byte, err error) {
	data, err := readPrivateFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, KeySize)
		if _, err := rand.Read(key); err != nil {
			return "", nil, fmt.Errorf("secret: generate master key: %w", err)
		}
		line := KeyID(key) + ":" + base64.StdEncoding.EncodeToString(key) + "\n"
		data, err = createPrivateFile(path, []byte(line))
	}
	if err != nil {
		return "", nil, err
	}
	id, key, err = parseKeyLine(strings.TrimSpace(string(data)))
	if err != nil {
		return "", nil, fmt.Errorf("secret: key file %s: %w", path, err)
	}
	return id, key, nil
}

// LoadOrCreateSecretFile returns the secret stored base64-encoded (one line)
// at path, for example the development JWT HMAC secret. If the file does not
// exist it creates it with n random bytes, mode 0600, creating the directory
// with mode 0700 if needed. An existing secret shorter than n bytes, or a file
// that group or others may access, is refused.
func LoadOrCreateSecretFile(path string, n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("secret: secret size %d must be positive", n)
	}
	data, err := readPrivateFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		fresh := make([]byte, n)
		if _, err := rand.Read(fresh); err != nil {
			return nil, fmt.Errorf("secret: generate secret: %w", err)
		}
		data, err = createPrivateFile(path, []byte(base64.StdEncoding.EncodeToString(fresh)+"\n"))
	}
	if err != nil {
		return nil, err
	}
	s, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("secret: secret file %s: not one base64 line: %w", path, err)
	}
	if len(s) < n {
		return nil, fmt.Errorf("secret: secret file %s holds %d bytes, want at least %d", path, len(s), n)
	}
	return s, nil
}

func parseKeyLine(line string) (string, []byte, error) {
	id, b64, ok := strings.Cut(line, ":")
	if !ok || id == "" || strings.ContainsAny(id, " \t\r\n") {
		return "", nil, errors.New(`want one line "<id>:<base64 key>"`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", nil, fmt.Errorf("key is not base64: %w", err)
	}
	if len(key) != KeySize {
		return "", nil, fmt.Errorf("key is %d bytes, want %d", len(key), KeySize)
	}
	return id, key, nil
}

// readPrivateFile reads a regular file that only its owner may access. A
// missing file yields an error wrapping fs.ErrNotExist.
func readPrivateFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secret: %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secret: %s has mode %04o and is accessible to group or others; run chmod 600 %s", path, perm, path)
	}
	if fi.Size() > maxSecretFileSize {
		return nil, fmt.Errorf("secret: %s is too large (%d bytes)", path, fi.Size())
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil && fi.Size() > 0 {
		return nil, fmt.Errorf("secret: read %s: %w", path, err)
	}
	return data, nil
}

// createPrivateFile writes data to a new file at path with mode 0600 without
// ever exposing a partial file: it writes a temporary file in the same
// directory and hard-links it into place, which fails if path exists. If
// another process won the race, its file is read and returned instead.
func createPrivateFile(path string, data []byte) ([]byte, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret: create directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("secret: create %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("secret: chmod %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("secret: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("secret: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("secret: close %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readPrivateFile(path)
		}
		return nil, fmt.Errorf("secret: create %s: %w", path, err)
	}
	return data, nil
}
