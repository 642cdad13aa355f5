// Package config assembles sshapi's settings: built-in defaults, then an optional YAML file,
// then SSHAPI_* environment variables, then command-line flags (applied by the CLI).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"gopkg.in/yaml.v3"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/api"
	"github.com/sshapi/sshapi/internal/jobs"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/transfer"
	"github.com/sshapi/sshapi/internal/ui"
)

// Config is the whole service's configuration. Each package owns its own section.
type Config struct {
	// Addr is the HTTP listen address.
	Addr string `yaml:"addr" env:"ADDR"`
	// DataDir holds the SQLite database, the credential master key and the dev JWT secret.
	DataDir string `yaml:"data_dir" env:"DATA_DIR"`
	// Database is the SQLite file (default <data_dir>/sshapi.db), or a postgres:// URL that puts
	// the store and the transfer queue on PostgreSQL, shared by several instances.
	Database string `yaml:"database" env:"DATABASE"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level" env:"LOG_LEVEL"`
	// LogFormat is text or json.
	LogFormat string `yaml:"log_format" env:"LOG_FORMAT"`
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" env:"SHUTDOWN_TIMEOUT"`
	// GCMinHeapBytes is the heap the Go garbage collector lets grow before it collects while
	// little is live (a floor under Go's GOGC=100 goal of twice what is live); 0 turns the floor
	// off. The soft memory limit the service derives from its budgets still applies. An
	// operator's GOGC takes precedence.
	GCMinHeapBytes int64 `yaml:"gc_min_heap_bytes" env:"GC_MIN_HEAP_BYTES"`
	// Auth configures accepted bearer tokens beyond the data dir's dev HS256 secret.
	Auth Auth `yaml:"auth" envPrefix:"AUTH_"`
	// Sharing configures links and the audit (grants, links, provenance).
	Sharing access.Config `yaml:"sharing" envPrefix:"SHARING_"`
	// S3 tunes how S3 systems are reached: each owner's requests in flight, further CAs, the
	// parts of uploads through the API.
	S3 access.S3Config `yaml:"s3" envPrefix:"S3_"`
	// HTTP tunes the API layer.
	HTTP api.Config `yaml:"http" envPrefix:"HTTP_"`
	// Pool tunes the SSH connection pool.
	Pool sshpool.Config `yaml:"pool" envPrefix:"POOL_"`
	// Transfer tunes the transfer engine.
	Transfer transfer.Config `yaml:"transfer" envPrefix:"TRANSFER_"`
	// Jobs configures batch jobs: the shared poll and each system's scheduler commands.
	Jobs jobs.Config `yaml:"jobs" envPrefix:"JOBS_"`
	// Network says which addresses systems may have (checked at registration and on every dial).
	Network netpolicy.Config `yaml:"network" envPrefix:"NETWORK_"`
	// Server bounds the HTTP server's time and headers and says whether a proxy is in front.
	Server Server `yaml:"server" envPrefix:"SERVER_"`
	// TLS serves HTTPS from certificate and key files.
	TLS TLS `yaml:"tls" envPrefix:"TLS_"`
	// Keys are the credential master keys and the token secret shared by several instances.
	Keys secret.Config `yaml:"keys" envPrefix:"KEYS_"`
	// UI configures the web interface at /ui/: its identity provider and sessions.
	UI ui.Config `yaml:"ui" envPrefix:"UI_"`
}

// Auth configures token verification.
type Auth struct {
	// JWKSURL accepts RS256/ES256 tokens from an OIDC provider's key set.
	JWKSURL string `yaml:"jwks_url" env:"JWKS_URL"`
	// Issuer and Audience, if set, must match the token's iss and aud. With JWKSURL both are
	// required: without them any token the provider issues for any client would be accepted.
	Issuer   string `yaml:"issuer" env:"ISSUER"`
	Audience string `yaml:"audience" env:"AUDIENCE"`
	// DisableDevSecret stops accepting HS256 tokens signed with the data dir's secret.
	DisableDevSecret bool `yaml:"disable_dev_secret" env:"DISABLE_DEV_SECRET"`
	// EnableDevSecret keeps accepting data-dir HS256 tokens alongside JWKSURL (off by default
	// once JWKSURL is set).
	EnableDevSecret bool `yaml:"enable_dev_secret" env:"ENABLE_DEV_SECRET"`
	// GroupsClaim names the token claim listing the caller's groups, for group grants
	// (default "groups").
	GroupsClaim string `yaml:"groups_claim" env:"GROUPS_CLAIM"`
	// Operators are users (token subjects) who may use /v1/admin; OperatorGroup, if set, makes
	// every member of that group (in GroupsClaim) an operator too.
	Operators     []string `yaml:"operators" env:"OPERATORS" envSeparator:","`
	OperatorGroup string   `yaml:"operator_group" env:"OPERATOR_GROUP"`
	// JWKSRefresh is how often the key set is fetched again in the background.
	JWKSRefresh time.Duration `yaml:"jwks_refresh" env:"JWKS_REFRESH"`
	// JWKSMinRefresh is the shortest time between two fetches; tokens naming an unknown key id
	// trigger at most one fetch per this interval.
	JWKSMinRefresh time.Duration `yaml:"jwks_min_refresh" env:"JWKS_MIN_REFRESH"`
	// JWKSFetchTimeout bounds one fetch of the key set.
	JWKSFetchTimeout time.Duration `yaml:"jwks_fetch_timeout" env:"JWKS_FETCH_TIMEOUT"`
}

// DevSecretEnabled reports whether HS256 tokens signed with the data dir's secret are accepted:
// by default without a JWKS URL, only with enable_dev_secret when one is set.
func (a Auth) DevSecretEnabled() bool {
	if a.JWKSURL != "" {
		return a.EnableDevSecret
	}
	return !a.DisableDevSecret
}

// DefaultGCMinHeapBytes is gc_min_heap_bytes's default. A streamed transfer's garbage is mostly
// SSH packets, dead as soon as they are copied on, while little stays live (7–9 MB in a 256 MiB
// download): with Go's goal of twice that, the collector ran 83 times for 383 ms of CPU in a
// 256 MiB upload and download, about a fifth of the process's; with a goal near 50 MB, 16 times
// for 91 ms.
const DefaultGCMinHeapBytes = 64 << 20

// Default returns the built-in defaults: a local listener and ./sshapi-data.
func Default() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		DataDir:         "./sshapi-data",
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 30 * time.Second,
		GCMinHeapBytes:  DefaultGCMinHeapBytes,
		// The embedded defaults serve a local development setup, where systems are often on
		// 127.0.0.1; a deployment should set network.allow_loopback: false.
		Network: netpolicy.Config{AllowLoopback: true},
		Auth:    Auth{JWKSRefresh: time.Hour, JWKSMinRefresh: time.Minute, JWKSFetchTimeout: 10 * time.Second},
		Server:  defaultServer(),
		TLS:     defaultTLS(),
	}
}

// Load returns the defaults overlaid with the YAML file at path (if path is not empty) and then
// with SSHAPI_* environment variables, validated.
func Load(path string) (Config, error) {
	cfg, err := Read(path)
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// Read is Load without Validate, for callers that apply command-line flags before validating.
func Read(path string) (Config, error) {
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
	return cfg, nil
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
	if c.GCMinHeapBytes < 0 {
		return fmt.Errorf("gc_min_heap_bytes must be 0 (off) or positive, not %d", c.GCMinHeapBytes)
	}
	if (strings.HasPrefix(c.Database, "postgres://") || strings.HasPrefix(c.Database, "postgresql://")) && !c.Keys.MasterKeysSet() {
		return errors.New("keys: with a PostgreSQL database (shared by instances), set keys.master_key_file or SSHAPI_KEYS_MASTER_KEYS " +
			"so that every instance opens the same credentials (sshapi keys generate prints a key)")
	}
	if _, err := netpolicy.New(c.Network); err != nil {
		return err
	}
	if err := c.HTTP.Validate(); err != nil {
		return err
	}
	if c.Auth.DisableDevSecret && c.Auth.JWKSURL == "" {
		return errors.New("auth: with disable_dev_secret set, jwks_url is required or no token could be accepted")
	}
	if err := c.Auth.validate(); err != nil {
		return err
	}
	return c.validateListen()
}

// validate checks the settings a real deployment with an identity provider depends on.
func (a Auth) validate() error {
	if a.EnableDevSecret && a.DisableDevSecret {
		return errors.New("auth: enable_dev_secret and disable_dev_secret contradict each other")
	}
	if a.JWKSURL == "" {
		return nil
	}
	if a.Issuer == "" || a.Audience == "" {
		return errors.New("auth: with jwks_url set, issuer and audience are required (the provider's iss and this service's client id), " +
			"or tokens the provider issued for any other application would be accepted")
	}
	u, err := url.Parse(a.JWKSURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && (u.Scheme != "http" || !loopbackHost(u.Hostname()))) {
		return errors.New("auth: jwks_url must be an https:// URL (http:// only for a loopback host)")
	}
	if a.JWKSRefresh <= 0 || a.JWKSMinRefresh <= 0 || a.JWKSFetchTimeout <= 0 {
		return errors.New("auth: jwks_refresh, jwks_min_refresh and jwks_fetch_timeout must be positive")
	}
	return nil
}
