package secret

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Config says where the credential master keys and the HS256 token secret come from when they
// are shared by several instances. Empty fields fall back to the generated files in the data
// directory (one instance only).
type Config struct {
	// MasterKeyFile holds master keys, one "<id>:<base64 32-byte key>" line each; the first
	// line is the primary key (new seals, rotate), the others still open older values. The file
	// must be mode 0600.
	MasterKeyFile string `yaml:"master_key_file" env:"MASTER_KEY_FILE"`
	// MasterKeys is the same list separated by commas, for secret stores that inject
	// environment variables (SSHAPI_KEYS_MASTER_KEYS).
	MasterKeys string `yaml:"master_keys" env:"MASTER_KEYS"`
	// TokenSecretFile holds the HS256 token secret, one base64 line of at least 32 bytes.
	TokenSecretFile string `yaml:"token_secret_file" env:"TOKEN_SECRET_FILE"`
	// TokenSecret is the same secret, base64, from the environment (SSHAPI_KEYS_TOKEN_SECRET).
	TokenSecret string `yaml:"token_secret" env:"TOKEN_SECRET"`
}

// MasterKeysSet reports whether master keys are configured (not generated in a data dir).
func (c Config) MasterKeysSet() bool { return c.MasterKeyFile != "" || c.MasterKeys != "" }

// TokenSecretSet reports whether the token secret is configured.
func (c Config) TokenSecretSet() bool { return c.TokenSecretFile != "" || c.TokenSecret != "" }

// Keyring returns the configured master keys; the first is the primary.
func (c Config) Keyring() (*Keyring, error) {
	var lines []string
	switch {
	case c.MasterKeyFile != "" && c.MasterKeys != "":
		return nil, errors.New("secret: set master_key_file or master_keys, not both")
	case c.MasterKeyFile != "":
		data, err := readPrivateFile(c.MasterKeyFile)
		if err != nil {
			return nil, err
		}
		lines = strings.Split(string(data), "\n")
	case c.MasterKeys != "":
		lines = strings.Split(c.MasterKeys, ",")
	default:
		return nil, errors.New("secret: no master keys configured")
	}
	keys := map[string][]byte{}
	primary := ""
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		id, key, err := parseKeyLine(l)
		if err != nil {
			return nil, fmt.Errorf("secret: master key %d: %w", i+1, err)
		}
		if _, dup := keys[id]; dup {
			return nil, fmt.Errorf("secret: master key id %q appears twice", id)
		}
		keys[id] = key
		if primary == "" {
			primary = id
		}
	}
	if primary == "" {
		return nil, errors.New("secret: the master key list is empty")
	}
	return NewKeyring(primary, keys)
}

// Secret returns the configured HS256 token secret (at least 32 bytes).
func (c Config) Secret() ([]byte, error) {
	var b64 string
	switch {
	case c.TokenSecretFile != "" && c.TokenSecret != "":
		return nil, errors.New("secret: set token_secret_file or token_secret, not both")
	case c.TokenSecretFile != "":
		data, err := readPrivateFile(c.TokenSecretFile)
		if err != nil {
			return nil, err
		}
		b64 = string(data)
	default:
		b64 = c.TokenSecret
	}
	s, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return nil, fmt.Errorf("secret: token secret is not base64: %w", err)
	}
	if len(s) < 32 {
		return nil, fmt.Errorf("secret: token secret holds %d bytes, want at least 32", len(s))
	}
	return s, nil
}

// NewKeyLine returns a fresh master key as a "<id>:<base64>" line.
func NewKeyLine() (string, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("secret: generate master key: %w", err)
	}
	return KeyID(key) + ":" + base64.StdEncoding.EncodeToString(key), nil
}
