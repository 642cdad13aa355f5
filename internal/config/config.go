// Package config assembles sshapi's settings: built-in defaults, then an optional YAML file,
// then SSHAPI_* environment variables, then command-line flags (applied by the CLI).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/caarlos0/env/v11"
	"gopkg.in/yaml.v3"

	"github.com/sshapi/sshapi/internal/api"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/transfer"
)

// Config is the whole service's configuration. Each package owns its own section.
type Config struct {
	// Addr is the HTTP listen address.
	Addr string `yaml:"addr" env:"ADDR"`
	// DataDir holds the SQLite database, the credential master key and the dev JWT secret.
	DataDir string `yaml:"data_dir" env:"DATA_DIR"`
	// Database is the SQLite file; default <data_dir>/sshapi.db.
	Database string `yaml:"database" env:"DATABASE"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level" env:"LOG_LEVEL"`
	// LogFormat is text or json.
	LogFormat string `yaml:"log_format" env:"LOG_FORMAT"`
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" env:"SHUTDOWN_TIMEOUT"`
	// Auth configures accepted bearer tokens beyond the data dir's dev HS256 secret.
	Auth Auth `yaml:"auth" envPrefix:"AUTH_"`
	// HTTP tunes the API layer.
	HTTP api.Config `yaml:"http" envPrefix:"HTTP_"`
	// Pool tunes the SSH connection pool.
	Pool sshpool.Config `yaml:"pool" envPrefix:"POOL_"`
	// Transfer tunes the transfer engine.
	Transfer transfer.Config `yaml:"transfer" envPrefix:"TRANSFER_"`
}

// Auth configures token verification.
type Auth struct {
	// JWKSURL accepts RS256/ES256 tokens from an OIDC provider's key set.
	JWKSURL string `yaml:"jwks_url" env:"JWKS_URL"`
	// Issuer and Audience, if set, must match the token's iss and aud.
	Issuer   string `yaml:"issuer" env:"ISSUER"`
	Audience string `yaml:"audience" env:"AUDIENCE"`
	// DisableDevSecret stops accepting HS256 tokens signed with the data dir's secret.
	DisableDevSecret bool `yaml:"disable_dev_secret" env:"DISABLE_DEV_SECRET"`
}

// Default returns the built-in defaults: a local listener and ./sshapi-data.
func Default() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		DataDir:         "./sshapi-data",
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 30 * time.Second,
	}
}

// Load returns the defaults overlaid with the YAML file at path (if path is not empty) and then
// with SSHAPI_* environment variables.
func Load(path string) (Config, error) {
	cfg := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("read config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := env.ParseWithOptions(&cfg, env.Options{Prefix: "SSHAPI_"}); err != nil {
		return cfg, fmt.Errorf("environment: %w", err)
	}
	return cfg, cfg.Validate()
}

// Validate checks values that would otherwise fail late.
func (c Config) Validate() error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log_level must be debug, info, warn or error, not %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("log_format must be text or json, not %q", c.LogFormat)
	}
	if c.DataDir == "" {
		return errors.New("data_dir must not be empty")
	}
	if err := c.HTTP.Validate(); err != nil {
		return err
	}
	if c.Auth.DisableDevSecret && c.Auth.JWKSURL == "" {
		return errors.New("auth: with disable_dev_secret set, jwks_url is required or no token could be accepted")
	}
	return nil
}
