package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLoadLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sshapi.yaml")
	if err := os.WriteFile(file, []byte("addr: 0.0.0.0:9000\npool:\n  max_conns_per_key: 3\n  idle_timeout: 2m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSHAPI_DATA_DIR", "/var/lib/sshapi")
	t.Setenv("SSHAPI_POOL_MAX_DIALS_PER_HOST", "2")
	t.Setenv("SSHAPI_POOL_MAX_CONNS_PER_KEY", "4")
	t.Setenv("SSHAPI_TRANSFER_MAX_STREAMS", "8")
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
