package tlsfile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePair writes a fresh self-signed certificate for 127.0.0.1 with the given serial number
// and its key, and moves both files' modification time to stamp.
func writePair(t *testing.T, certFile, keyFile string, serial int64, stamp time.Time) {
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
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(name, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(name, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
}

// servedSerial makes a real TLS handshake with a listener using c and returns the serial number
// of the certificate it presented.
func servedSerial(t *testing.T, c *Cert) int64 {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: c.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			err = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
		done <- err
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	serial := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	conn.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return serial
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	base := time.Now().Add(-time.Hour)
	writePair(t, certFile, keyFile, 1, base)
	c, err := Load(certFile, keyFile, 0, nil) // interval 0: every handshake checks the files
	if err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, c); got != 1 {
		t.Fatalf("serial %d, want 1", got)
	}

	writePair(t, certFile, keyFile, 2, base.Add(time.Minute))
	if got := servedSerial(t, c); got != 2 {
		t.Fatalf("after replacing the files: serial %d, want 2", got)
	}

	// A key that does not match the certificate (half of a renewal) keeps the old pair.
	writePair(t, filepath.Join(dir, "other.pem"), keyFile, 3, base.Add(2*time.Minute))
	if got := servedSerial(t, c); got != 2 {
		t.Fatalf("after a mismatched key: serial %d, want the previous 2", got)
	}
	writePair(t, certFile, keyFile, 4, base.Add(3*time.Minute))
	if got := servedSerial(t, c); got != 4 {
		t.Fatalf("after the renewal completed: serial %d, want 4", got)
	}

	// With a long interval, a change is not looked at before the interval passes.
	slow, err := Load(certFile, keyFile, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, certFile, keyFile, 5, base.Add(4*time.Minute))
	if got := servedSerial(t, slow); got != 4 {
		t.Fatalf("interval not honoured: serial %d, want 4", got)
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if _, err := Load(certFile, keyFile, time.Second, nil); err == nil {
		t.Fatal("missing files accepted")
	}
	writePair(t, certFile, keyFile, 1, time.Now())
	writePair(t, filepath.Join(dir, "x.pem"), keyFile, 2, time.Now())
	if _, err := Load(certFile, keyFile, time.Second, nil); err == nil {
		t.Fatal("mismatched certificate and key accepted")
	}
}
