// Package tlsfile serves a TLS certificate from PEM files and picks up a renewed certificate
// without a restart: handshakes check the files' size and modification time at most once per
// interval and reload them when either changed. A failed reload keeps the previous certificate.
package tlsfile

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Cert is a certificate loaded from a certificate file and a key file. It is safe for
// concurrent use and owns no goroutine.
type Cert struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	mu        sync.Mutex // guards the fields below
	cert      *tls.Certificate
	stamp     [2]fileStamp
	lastCheck time.Time
}

// fileStamp is what tells a changed file from an unchanged one.
type fileStamp struct {
	size int64
	mod  time.Time
}

// Load reads the certificate chain (leaf first) and its private key, failing if they cannot be
// read or do not match. interval bounds how often handshakes look at the files again.
func Load(certFile, keyFile string, interval time.Duration, log *slog.Logger) (*Cert, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cert{certFile: certFile, keyFile: keyFile, interval: interval, log: log}
	stamp, err := c.stat()
	if err != nil {
		return nil, err
	}
	cert, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cert, c.stamp, c.lastCheck = cert, stamp, time.Now()
	return c, nil
}

// GetCertificate is a tls.Config.GetCertificate returning the current certificate, reloaded
// first if the files changed.
func (c *Cert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.lastCheck) >= c.interval {
		c.lastCheck = now
		c.reloadLocked()
	}
	return c.cert, nil
}

// reloadLocked reads the files again if their stamps changed; c.mu must be held. A half-written
// or mismatched pair is logged and retried at the next check, the old certificate stays.
func (c *Cert) reloadLocked() {
	stamp, err := c.stat()
	if err != nil {
		c.log.Warn("TLS certificate files unreadable; still serving the previous certificate", "err", err)
		return
	}
	if stamp == c.stamp {
		return
	}
	cert, err := c.read()
	if err != nil {
		c.log.Warn("TLS certificate reload failed; still serving the previous certificate", "err", err)
		return
	}
	c.cert, c.stamp = cert, stamp
	c.log.Info("TLS certificate reloaded", "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
}

func (c *Cert) stat() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, name := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return s, fmt.Errorf("tls: %w", err)
		}
		s[i] = fileStamp{size: fi.Size(), mod: fi.ModTime()}
	}
	return s, nil
}

func (c *Cert) read() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load %s and %s: %w", c.certFile, c.keyFile, err)
	}
	return &cert, nil // LoadX509KeyPair fills cert.Leaf since Go 1.23
}
