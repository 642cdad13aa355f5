package sshtest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// DefaultHostKeyTypes are the host keys a distribution's default sshd generates.
var DefaultHostKeyTypes = []string{"rsa", "ecdsa", "ed25519"}

// sharedHostKeys caches one key per type for the test binary: RSA generation is slow, and
// servers that need fresh keys (RotateHostKeys) make their own.
var sharedHostKeys sync.Map // type -> crypto.Signer

// NewPrivateKey makes a private key of type "rsa" (3072 bits, or bits if given), "ecdsa"
// (P-256) or "ed25519".
func NewPrivateKey(typ string, bits int) (crypto.Signer, error) {
	switch typ {
	case "rsa":
		if bits == 0 {
			bits = 3072
		}
		return rsa.GenerateKey(rand.Reader, bits)
	case "ecdsa":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ed25519":
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("unknown key type %q (want rsa, ecdsa or ed25519)", typ)
}

func hostPrivateKey(typ string, fresh bool) (crypto.Signer, error) {
	if !fresh {
		if k, ok := sharedHostKeys.Load(typ); ok {
			return k.(crypto.Signer), nil
		}
	}
	k, err := NewPrivateKey(typ, 0)
	if err != nil {
		return nil, err
	}
	if !fresh {
		k2, _ := sharedHostKeys.LoadOrStore(typ, k)
		return k2.(crypto.Signer), nil
	}
	return k, nil
}

// writeHostKeys writes the server's host keys (fresh ones when rotate, else the binary's shared
// ones) and, with Options.HostCertificates, their certificates; it sets HostKey, HostKeys and
// HostCA and returns the sshd_config lines naming the files.
func (s *Server) writeHostKeys(rotate bool) (string, error) {
	types := s.opts.HostKeyTypes
	if len(types) == 0 {
		types = DefaultHostKeyTypes
	}
	var ca ssh.Signer
	if s.opts.HostCertificates {
		caKey, err := NewPrivateKey("ed25519", 0)
		if err != nil {
			return "", err
		}
		if ca, err = ssh.NewSignerFromSigner(caKey); err != nil {
			return "", fmt.Errorf("host CA: %w", err)
		}
		s.HostCA = ca.PublicKey()
	}
	var lines strings.Builder
	var keys []ssh.PublicKey
	var primary ssh.PublicKey
	for _, typ := range types {
		priv, err := hostPrivateKey(typ, rotate)
		if err != nil {
			return "", err
		}
		block, err := ssh.MarshalPrivateKey(priv, "")
		if err != nil {
			return "", fmt.Errorf("marshal host key: %w", err)
		}
		path := filepath.Join(s.Dir, "ssh_host_"+typ+"_key")
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return "", fmt.Errorf("write host key: %w", err)
		}
		signer, err := ssh.NewSignerFromSigner(priv)
		if err != nil {
			return "", fmt.Errorf("host key signer: %w", err)
		}
		pub := signer.PublicKey()
		keys = append(keys, pub)
		if typ == "ed25519" || primary == nil {
			primary = pub
		}
		fmt.Fprintf(&lines, "HostKey %s\n", path)
		if ca != nil {
			cert := &ssh.Certificate{
				Key: pub, CertType: ssh.HostCert, KeyId: "sshtest host " + typ,
				ValidPrincipals: []string{"127.0.0.1", "localhost"},
				ValidAfter:      uint64(time.Now().Add(-time.Hour).Unix()),
				ValidBefore:     uint64(time.Now().Add(24 * time.Hour).Unix()),
			}
			if err := cert.SignCert(rand.Reader, ca); err != nil {
				return "", fmt.Errorf("sign host certificate: %w", err)
			}
			if err := os.WriteFile(path+"-cert.pub", ssh.MarshalAuthorizedKey(cert), 0o644); err != nil {
				return "", fmt.Errorf("write host certificate: %w", err)
			}
			fmt.Fprintf(&lines, "HostCertificate %s-cert.pub\n", path)
		}
	}
	s.mu.Lock()
	s.HostKey, s.HostKeys = primary, keys
	s.mu.Unlock()
	return lines.String(), nil
}

// RotateHostKeys gives the server new host keys of the same types (as a reinstalled or
// impostor server would present) and restarts it. Clients that pinned the old keys must refuse.
func (s *Server) RotateHostKeys(ctx context.Context) error {
	if _, err := s.writeHostKeys(true); err != nil {
		return err
	}
	return s.Restart(ctx)
}

// KnownHosts returns the server's host keys as ssh-keyscan prints them: one
// "[host]:port type base64" line per key.
func (s *Server) KnownHosts() string {
	var b strings.Builder
	for _, k := range s.HostKeys {
		fmt.Fprintf(&b, "[%s]:%d %s", s.Host, s.Port, ssh.MarshalAuthorizedKey(k))
	}
	return b.String()
}

// AuthorizedHostKeyOf returns the server's host key of the given SSH type (for example
// "ssh-rsa", "ecdsa-sha2-nistp256") in authorized_keys form, or "" if it has none.
func (s *Server) AuthorizedHostKeyOf(keyType string) string {
	for _, k := range s.HostKeys {
		if k.Type() == keyType {
			return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
		}
	}
	return ""
}
