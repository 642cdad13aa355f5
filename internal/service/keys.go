package service

import (
	"fmt"
	"path/filepath"

	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/secret"
)

// LoadKeyring returns the credential master keys: the configured ones (keys.master_key_file,
// SSHAPI_KEYS_MASTER_KEYS), shared by every instance, or else the data directory's generated
// key file.
func LoadKeyring(cfg config.Config) (*secret.Keyring, error) {
	if cfg.Keys.MasterKeysSet() {
		k, err := cfg.Keys.Keyring()
		if err != nil {
			return nil, fmt.Errorf("credential master keys: %w", err)
		}
		return k, nil
	}
	keyID, key, err := secret.LoadOrCreateKeyFile(filepath.Join(cfg.DataDir, MasterKeyFile))
	if err != nil {
		return nil, fmt.Errorf("credential master key: %w", err)
	}
	k, err := secret.NewKeyring(keyID, map[string][]byte{keyID: key})
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	return k, nil
}

// TokenSecret returns the HS256 token secret: the configured one (keys.token_secret_file,
// SSHAPI_KEYS_TOKEN_SECRET), shared by every instance, or else the data directory's generated
// secret.
func TokenSecret(cfg config.Config) ([]byte, error) {
	if cfg.Keys.TokenSecretSet() {
		s, err := cfg.Keys.Secret()
		if err != nil {
			return nil, fmt.Errorf("token secret: %w", err)
		}
		return s, nil
	}
	return DevSecret(cfg.DataDir)
}
