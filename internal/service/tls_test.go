package service

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
)

// testCert is a self-signed certificate for 127.0.0.1 in PEM form.
type testCert struct {
	certPEM, keyPEM []byte
	cert            *x509.Certificate
}

func newTestCert(t *testing.T, serial int64) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "sshapi test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		cert:    cert,
	}
}

// install writes the pair to the files and dates them at stamp, so a replacement is seen as a
// change even within the file system's time resolution.
func (c testCert) install(t *testing.T, certFile, keyFile string, stamp time.Time) {
	t.Helper()
	for name, b := range map[string][]byte{certFile: c.certPEM, keyFile: c.keyPEM} {
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(name, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServiceHTTPS starts the service with certificate files: it answers over HTTPS (verified
// against the certificate), refuses plain HTTP on that port, and after the files are replaced
// new connections get the new certificate without a restart.
func TestServiceHTTPS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first, second := newTestCert(t, 1), newTestCert(t, 2)
	first.install(t, certFile, keyFile, time.Now().Add(-time.Hour))

	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Addr = "127.0.0.1:0"
	cfg.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile, ReloadInterval: time.Nanosecond}
	svc, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()

	roots := x509.NewCertPool()
	roots.AddCert(first.cert)
	roots.AddCert(second.cert)
	// get makes a request on a new connection and returns the serial number the server presented.
	get := func(path string) int64 {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true, ForceAttemptHTTP2: true}}
		res, err := client.Get("https://" + svc.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.TLS == nil || res.ProtoMajor != 2 {
			t.Fatalf("GET %s over HTTPS: %s %s", path, res.Proto, res.Status)
		}
		return res.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if got := get("/healthz"); got != 1 {
		t.Fatalf("served certificate %d, want 1", got)
	}

	res, err := http.Get("http://" + svc.Addr() + "/healthz")
	if err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP answered on the HTTPS port")
		}
	}

	second.install(t, certFile, keyFile, time.Now())
	if got := get("/v1/version"); got != 2 {
		t.Fatalf("after replacing the files the service presented certificate %d, want 2", got)
	}
}

// TestServiceRefusesPlainHTTPOffLoopback: without TLS and without behind_proxy, a non-loopback
// listen address stops the service before anything is opened or listens; so does a certificate
// that cannot be loaded.
func TestServiceRefusesPlainHTTPOffLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		cfg := config.Default()
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		cfg.Addr = addr
		_, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "not a loopback address and TLS is off") || !strings.Contains(err.Error(), "tls.cert_file") {
			t.Fatalf("addr %s: New = %v, want a refusal naming the TLS settings", addr, err)
		}
		if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
			t.Fatalf("addr %s: data dir created before the refusal (%v)", addr, err)
		}
	}
	// With TLS configured, an unreadable certificate stops the start just as early.
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(t.TempDir(), "missing.pem"), filepath.Join(t.TempDir(), "missing.key")
	if _, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Fatalf("New with a missing certificate = %v", err)
	}
	if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
		t.Fatalf("data dir created before the certificate was refused (%v)", err)
	}
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestServiceForwardedAndHeaderCap: X-Forwarded-For sets the logged client address only when the
// peer is a trusted proxy, and oversized headers are refused.
func TestServiceForwardedAndHeaderCap(t *testing.T) {
	for _, tc := range []struct {
		name       string
		trusted    []string
		wantClient string // prefix of the logged client address
	}{
		{"trusted proxy", []string{"127.0.0.0/8"}, "198.51.100.7:"},
		{"untrusted peer", []string{"10.0.0.0/8"}, "127.0.0.1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			cfg := config.Default()
			cfg.DataDir = filepath.Join(t.TempDir(), "data")
			cfg.Addr = "127.0.0.1:0"
			cfg.Server.TrustedProxies = tc.trusted
			svc, err := New(t.Context(), cfg, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			sec, err := DevSecret(cfg.DataDir)
			if err != nil {
				t.Fatal(err)
			}
			tok, _ := auth.IssueHS256(sec, "alice", time.Minute, time.Now())
			req, _ := http.NewRequest("GET", "http://"+svc.Addr()+"/v1/systems", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("X-Forwarded-For", "198.51.100.7")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()

			big, _ := http.NewRequest("GET", "http://"+svc.Addr()+"/healthz", nil)
			big.Header.Set("X-Padding", strings.Repeat("p", cfg.Server.MaxHeaderBytes+8192))
			bigRes, err := http.DefaultClient.Do(big)
			if err != nil {
				t.Fatal(err)
			}
			bigRes.Body.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := svc.Stop(ctx); err != nil {
				t.Fatal(err)
			}

			if bigRes.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("oversized headers: %d, want 431", bigRes.StatusCode)
			}
			var client string
			for _, l := range logs.lines() {
				if l["msg"] == "http request" && l["route"] == "/v1/systems" {
					client, _ = l["client"].(string)
				}
			}
			if !strings.HasPrefix(client, tc.wantClient) {
				t.Errorf("logged client %q, want %s…", client, tc.wantClient)
			}
		})
	}
}
