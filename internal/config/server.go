package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/sshapi/sshapi/internal/forwarded"
)

// Server bounds the HTTP server's time and header sizes and says whether it sits behind a
// reverse proxy. Streams (downloads, NDJSON, SSE, uploads) are bounded per read and per write,
// never as a whole, so a long stream that keeps moving is never cut.
type Server struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" env:"READ_HEADER_TIMEOUT"`
	// BodyReadTimeout is the longest wait for the next bytes of a request body; a handler that
	// sets its own read deadline (uploads) takes over.
	BodyReadTimeout time.Duration `yaml:"body_read_timeout" env:"BODY_READ_TIMEOUT"`
	// WriteTimeout is the longest one response write may block: a client that stops reading
	// is dropped after it. A handler that sets its own write deadline (streams) takes over.
	WriteTimeout time.Duration `yaml:"write_timeout" env:"WRITE_TIMEOUT"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout" env:"IDLE_TIMEOUT"`
	// MaxHeaderBytes caps the request line and headers.
	MaxHeaderBytes int `yaml:"max_header_bytes" env:"MAX_HEADER_BYTES"`
	// BehindProxy allows plain HTTP on a non-loopback address: a TLS-terminating proxy in
	// front of the service protects keys and tokens on the network.
	BehindProxy bool `yaml:"behind_proxy" env:"BEHIND_PROXY"`
	// TrustedProxies are the addresses or CIDRs whose X-Forwarded-For and X-Forwarded-Proto
	// headers are believed; from anyone else those headers are dropped.
	TrustedProxies []string `yaml:"trusted_proxies" env:"TRUSTED_PROXIES" envSeparator:","`
}

// TLS names the certificate and key the service serves HTTPS with. Both files are re-read
// when they change, so a renewed certificate needs no restart.
type TLS struct {
	// CertFile is a PEM certificate chain, leaf first.
	CertFile string `yaml:"cert_file" env:"CERT_FILE"`
	// KeyFile is the PEM private key of the leaf certificate.
	KeyFile string `yaml:"key_file" env:"KEY_FILE"`
	// ReloadInterval is how often, at most, the files are checked for changes (on handshakes).
	ReloadInterval time.Duration `yaml:"reload_interval" env:"RELOAD_INTERVAL"`
}

// Enabled reports whether HTTPS is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// defaultServer returns the server section's defaults.
func defaultServer() Server {
	return Server{
		ReadHeaderTimeout: 10 * time.Second,
		BodyReadTimeout:   time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// defaultTLS returns the TLS section's defaults (off).
func defaultTLS() TLS { return TLS{ReloadInterval: 5 * time.Second} }

// validateListen checks the server and TLS sections and refuses plain HTTP on an address other
// than loopback unless the operator says a TLS-terminating proxy is in front.
func (c Config) validateListen() error {
	s := c.Server
	for name, d := range map[string]time.Duration{
		"server.read_header_timeout": s.ReadHeaderTimeout, "server.body_read_timeout": s.BodyReadTimeout,
		"server.write_timeout": s.WriteTimeout, "server.idle_timeout": s.IdleTimeout,
	} {
		if d <= 0 {
			return fmt.Errorf("%s must be positive, not %v", name, d)
		}
	}
	if s.MaxHeaderBytes < 4096 {
		return fmt.Errorf("server.max_header_bytes must be at least 4096, not %d", s.MaxHeaderBytes)
	}
	if _, err := forwarded.Parse(s.TrustedProxies); err != nil {
		return fmt.Errorf("server.trusted_proxies: %w", err)
	}
	if c.TLS.Enabled() {
		if c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
			return errors.New("tls.cert_file and tls.key_file must be set together")
		}
		if c.TLS.ReloadInterval <= 0 {
			return fmt.Errorf("tls.reload_interval must be positive, not %v", c.TLS.ReloadInterval)
		}
		return nil
	}
	if s.BehindProxy || isLoopback(c.Addr) {
		return nil
	}
	return fmt.Errorf("addr %q is not a loopback address and TLS is off: private keys and tokens would cross the network in clear; "+
		"set tls.cert_file and tls.key_file, or server.behind_proxy: true if a TLS-terminating proxy is in front", c.Addr)
}

// isLoopback reports whether addr (host:port) listens only on loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackHost(host)
}

// loopbackHost reports whether host is "localhost" or a loopback IP address.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
