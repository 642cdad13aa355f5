package service

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/store"
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

// ErrDevSecretOff means the configuration accepts no HS256 tokens, so none may be issued.
var ErrDevSecretOff = errors.New("the configuration does not accept HS256 tokens (auth.jwks_url is set without auth.enable_dev_secret, or auth.disable_dev_secret is set)")

// TokenSecret returns the HS256 token secret: the configured one (keys.token_secret_file,
// SSHAPI_KEYS_TOKEN_SECRET), shared by every instance, or else the data directory's generated
// secret; ErrDevSecretOff when the configuration accepts no HS256 tokens.
func TokenSecret(cfg config.Config) ([]byte, error) {
	if !cfg.Auth.DevSecretEnabled() {
		return nil, ErrDevSecretOff
	}
	if cfg.Keys.TokenSecretSet() {
		s, err := cfg.Keys.Secret()
		if err != nil {
			return nil, fmt.Errorf("token secret: %w", err)
		}
		return s, nil
	}
	return DevSecret(cfg.DataDir)
}

// RotateKeys re-wraps the data key of every credential not sealed under the primary master key
// (the first configured) with it. Ciphertexts do not change, and every instance that holds both
// keys opens both forms, so it runs while the service serves; once it reports no credential
// left under an old key, that key may be removed from every instance's configuration.
func RotateKeys(ctx context.Context, cfg config.Config) (rewrapped int, err error) {
	keyring, err := LoadKeyring(cfg)
	if err != nil {
		return 0, err
	}
	db, tdb, err := OpenDatabases(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer tdb.Close()
	defer db.Close()
	rw, ok := db.(store.Rewrapper)
	if !ok {
		return 0, errors.New("keys rotate: the store cannot re-wrap credentials")
	}
	primary := keyring.PrimaryID()
	return rw.RewrapCredentials(ctx, func(c *store.Credential) (secret.Sealed, bool, error) {
		if c.Sealed.KeyID == primary {
			return secret.Sealed{}, false, nil
		}
		s, err := keyring.Rewrap(c.Sealed, access.CredentialAAD(c.Owner, c.SystemID, c.Username))
		return s, err == nil, err
	})
}
