package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLoadLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sshapi.yaml")
	if err := os.WriteFile(file, []byte("addr: 0.0.0.0:9000\nserver:\n  behind_proxy: true\n  trusted_proxies: [10.0.0.0/8]\npool:\n  max_conns_per_key: 3\n  idle_timeout: 2m\ns3:\n  part_size: 16777216\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSHAPI_DATA_DIR", "/var/lib/sshapi")
	t.Setenv("SSHAPI_POOL_MAX_DIALS_PER_HOST", "2")
	t.Setenv("SSHAPI_POOL_MAX_CONNS_PER_KEY", "4")
	t.Setenv("SSHAPI_TRANSFER_MAX_STREAMS", "8")
	t.Setenv("SSHAPI_SERVER_WRITE_TIMEOUT", "90s")
	t.Setenv("SSHAPI_S3_MAX_REQUESTS_PER_OWNER", "5")
	cfg, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"file value", cfg.Addr, "0.0.0.0:9000"},
		{"env value", cfg.DataDir, "/var/lib/sshapi"},
		{"nested env", cfg.Pool.MaxDialsPerHost, 2},
		{"env beats file", cfg.Pool.MaxConnsPerKey, 4},
		{"duration from file", cfg.Pool.IdleTimeout, 2 * time.Minute},
		{"default kept", cfg.LogLevel, "info"},
		{"transfer section from env", cfg.Transfer.MaxStreams, 8},
		{"server section from file", cfg.Server.BehindProxy, true},
		{"server section from env", cfg.Server.WriteTimeout, 90 * time.Second},
		{"server default kept", cfg.Server.ReadHeaderTimeout, 10 * time.Second},
		{"trusted proxies", len(cfg.Server.TrustedProxies), 1},
		{"s3 section from file", cfg.S3.PartSize, int64(16 << 20)},
		{"s3 section from env", cfg.S3.MaxRequestsPerOwner, 5},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte("adr: typo\n"), 0o600)
	if _, err := Load(bad); err == nil {
		t.Error("unknown key in config file accepted")
	}
	t.Setenv("SSHAPI_LOG_LEVEL", "loud")
	if _, err := Load(""); err == nil {
		t.Error("invalid log level accepted")
	}
	t.Setenv("SSHAPI_LOG_LEVEL", "info")
	for _, tc := range []struct {
		value string
		ok    bool
	}{{"67108864", true}, {"0", true}, {"-1", false}} {
		t.Setenv("SSHAPI_GC_MIN_HEAP_BYTES", tc.value)
		cfg, err := Load("")
		switch {
		case tc.ok && err != nil:
			t.Errorf("gc_min_heap_bytes %s refused: %v", tc.value, err)
		case tc.ok && strconv.FormatInt(cfg.GCMinHeapBytes, 10) != tc.value:
			t.Errorf("gc_min_heap_bytes %s read as %d", tc.value, cfg.GCMinHeapBytes)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "gc_min_heap_bytes")):
			t.Errorf("gc_min_heap_bytes %s: error %v, want one naming gc_min_heap_bytes", tc.value, err)
		}
	}
}

// TestValidateDeployment covers the rules that keep a real deployment from running open by
// mistake: plain HTTP only on loopback or behind a proxy, and JWKS tokens only with issuer and
// audience checks.
func TestValidateDeployment(t *testing.T) {
	jwks := func(c *Config) {
		c.Auth.JWKSURL, c.Auth.Issuer, c.Auth.Audience = "https://idp.example/jwks", "https://idp.example", "sshapi"
	}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // "" means valid
		devHS   bool   // whether the data-dir HS256 secret is on (when valid)
	}{
		{name: "defaults", edit: func(*Config) {}, devHS: true},
		{name: "localhost", edit: func(c *Config) { c.Addr = "localhost:8080" }, devHS: true},
		{name: "IPv6 loopback", edit: func(c *Config) { c.Addr = "[::1]:8080" }, devHS: true},
		{name: "all interfaces without TLS", edit: func(c *Config) { c.Addr = ":8080" }, wantErr: "not a loopback address and TLS is off"},
		{name: "0.0.0.0 without TLS", edit: func(c *Config) { c.Addr = "0.0.0.0:8080" }, wantErr: "server.behind_proxy"},
		{name: "host name without TLS", edit: func(c *Config) { c.Addr = "api.example:8080" }, wantErr: "not a loopback address"},
		{name: "behind a proxy", edit: func(c *Config) { c.Addr = "0.0.0.0:8080"; c.Server.BehindProxy = true }, devHS: true},
		{name: "TLS", edit: func(c *Config) { c.Addr = "0.0.0.0:8443"; c.TLS.CertFile, c.TLS.KeyFile = "c.pem", "k.pem" }, devHS: true},
		{name: "TLS cert without key", edit: func(c *Config) { c.TLS.CertFile = "c.pem" }, wantErr: "set together"},
		{name: "bad trusted proxy", edit: func(c *Config) { c.Server.TrustedProxies = []string{"10.0.0.0/40"} }, wantErr: "trusted_proxies"},
		{name: "zero write timeout", edit: func(c *Config) { c.Server.WriteTimeout = 0 }, wantErr: "write_timeout"},
		{name: "tiny header cap", edit: func(c *Config) { c.Server.MaxHeaderBytes = 100 }, wantErr: "max_header_bytes"},
		{name: "JWKS with issuer and audience", edit: jwks, devHS: false},
		{name: "JWKS and dev secret enabled", edit: func(c *Config) { jwks(c); c.Auth.EnableDevSecret = true }, devHS: true},
		{name: "JWKS without audience", edit: func(c *Config) { jwks(c); c.Auth.Audience = "" }, wantErr: "issuer and audience are required"},
		{name: "JWKS without issuer", edit: func(c *Config) { jwks(c); c.Auth.Issuer = "" }, wantErr: "issuer and audience are required"},
		{name: "JWKS over plain HTTP", edit: func(c *Config) { jwks(c); c.Auth.JWKSURL = "http://idp.example/jwks" }, wantErr: "https://"},
		{name: "JWKS over HTTP on loopback", edit: func(c *Config) { jwks(c); c.Auth.JWKSURL = "http://127.0.0.1:9/jwks" }},
		{name: "enable and disable", edit: func(c *Config) { jwks(c); c.Auth.EnableDevSecret, c.Auth.DisableDevSecret = true, true }, wantErr: "contradict"},
		{name: "dev secret disabled without JWKS", edit: func(c *Config) { c.Auth.DisableDevSecret = true }, wantErr: "jwks_url is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if got := cfg.Auth.DevSecretEnabled(); got != tt.devHS {
					t.Errorf("DevSecretEnabled = %v, want %v", got, tt.devHS)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate error = %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}

// TestNetworkSection: the embedded defaults allow loopback (make run against 127.0.0.1); the file
// and the environment can turn it off and add lists; an invalid prefix is refused at load.
func TestNetworkSection(t *testing.T) {
	if !Default().Network.AllowLoopback {
		t.Fatal("the embedded defaults must allow loopback")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "sshapi.yaml")
	_ = os.WriteFile(file, []byte("network:\n  deny_cidrs: [10.0.0.0/8]\n  deny_hosts: ['*.internal']\n"), 0o600)
	t.Setenv("SSHAPI_NETWORK_ALLOW_LOOPBACK", "false")
	t.Setenv("SSHAPI_NETWORK_ALLOW_CIDRS", "192.0.2.0/24,198.51.100.0/24")
	cfg, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Network
	if n.AllowLoopback || len(n.DenyCIDRs) != 1 || n.DenyHosts[0] != "*.internal" || len(n.AllowCIDRs) != 2 || n.AllowCIDRs[1] != "198.51.100.0/24" {
		t.Fatalf("network section %+v", n)
	}
	t.Setenv("SSHAPI_NETWORK_DENY_CIDRS", "10.0.0.0/99")
	if _, err := Load(""); err == nil {
		t.Fatal("an invalid deny_cidrs entry was accepted")
	}
}
