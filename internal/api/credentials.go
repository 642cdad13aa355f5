package api

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/store"
)

// putCredentialRequest is an SSH key, or an S3 system's access keys (s3CredentialFields).
type putCredentialRequest struct {
	Username    string `json:"username"`
	PrivateKey  string `json:"private_key"`
	Passphrase  string `json:"passphrase"`
	Certificate string `json:"certificate"`
	s3CredentialFields
}

type credentialJSON struct {
	Username             string    `json:"username"`
	KeyType              string    `json:"key_type"`
	PublicKeyFingerprint string    `json:"public_key_fingerprint"`
	Certificate          bool      `json:"certificate"`
	CreatedAt            time.Time `json:"created_at"`
}

func toCredentialJSON(c *store.Credential) any {
	if c.KeyType == store.CredentialS3 {
		return s3CredentialJSON{Kind: store.KindS3, AccessKeyID: c.Username, CreatedAt: c.CreatedAt}
	}
	return credentialJSON{Username: c.Username, KeyType: c.KeyType, PublicKeyFingerprint: c.PublicKeyFingerprint,
		Certificate: c.Certificate != "", CreatedAt: c.CreatedAt}
}

var usernamePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)

// parseCredential checks a submitted private key (and passphrase and certificate) and returns the
// key re-encoded as an unencrypted OpenSSH private key, which is what gets sealed, plus its
// public half. Errors name the field and never echo key material.
func parseCredential(req putCredentialRequest) (plain []byte, pub ssh.PublicKey, err error) {
	if req.Username == "" {
		return nil, nil, badField("username", "is required")
	}
	if !usernamePattern.MatchString(req.Username) {
		return nil, nil, badField("username", "is not a valid remote user name")
	}
	if strings.TrimSpace(req.PrivateKey) == "" {
		return nil, nil, badField("private_key", "is required (OpenSSH or PEM private key)")
	}
	var raw any
	if req.Passphrase != "" {
		raw, err = ssh.ParseRawPrivateKeyWithPassphrase([]byte(req.PrivateKey), []byte(req.Passphrase))
		if errors.Is(err, x509.IncorrectPasswordError) {
			return nil, nil, badField("passphrase", "does not decrypt private_key")
		}
	} else {
		raw, err = ssh.ParseRawPrivateKey([]byte(req.PrivateKey))
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			return nil, nil, badField("passphrase", "private_key is encrypted: a passphrase is required")
		}
	}
	if err != nil {
		return nil, nil, badField("private_key", "is not an OpenSSH or PEM private key")
	}
	signer, err := ssh.NewSignerFromKey(raw)
	if err != nil {
		return nil, nil, badField("private_key", "unsupported key type")
	}
	if k, ok := raw.(*rsa.PrivateKey); ok && k.N.BitLen() < minRSABits {
		return nil, nil, badField("private_key", "RSA keys must have at least %d bits (this one has %d)", minRSABits, k.N.BitLen())
	}
	block, err := ssh.MarshalPrivateKey(raw, "")
	if err != nil {
		return nil, nil, badField("private_key", "cannot be re-encoded: unsupported key type")
	}
	if req.Certificate != "" {
		cs, err := access.CertSigner(signer, req.Certificate)
		if err != nil {
			return nil, nil, badField("certificate", "%v", err)
		}
		cert := cs.PublicKey().(*ssh.Certificate)
		if err := access.CertUsable(cert, time.Now()); err != nil {
			return nil, nil, badField("certificate", "%v", err)
		}
		if len(cert.ValidPrincipals) > 0 && !slices.Contains(cert.ValidPrincipals, req.Username) {
			return nil, nil, badField("certificate", "is valid for principals %v, not for username %q", cert.ValidPrincipals, req.Username)
		}
	}
	return pem.EncodeToMemory(block), signer.PublicKey(), nil
}

// minRSABits is the smallest RSA user key accepted (OpenSSH refuses smaller ones too).
const minRSABits = 2048

func (s *Server) putCredential(w http.ResponseWriter, r *http.Request) error {
	var req putCredentialRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	p := principal(r)
	id := r.PathValue("id")
	sys, err := s.deps.Store.GetSystem(r.Context(), p.User, id)
	if err != nil {
		return err
	}
	if sys.KindOf() == store.KindS3 {
		return s.putS3Credential(w, r, sys, req)
	}
	if f := req.s3FieldSet(); f != "" {
		return badField(f, "is a field of an S3 system's credential; this is an SSH system (username, private_key)")
	}
	cred, err := s.storeCredential(r, p.User, id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toCredentialJSON(cred))
	return nil
}

// storeCredential validates, seals and saves the caller's credential for a system and drops the
// connections made with the previous one.
func (s *Server) storeCredential(r *http.Request, owner, id string, req putCredentialRequest) (*store.Credential, error) {
	plain, pub, err := s.checkedCredential(r.Context(), owner, req) // KDF cost capped, parsing bounded
	if err != nil {
		return nil, err
	}
	sealed, err := s.deps.Keyring.Seal(plain, access.CredentialAAD(owner, id, req.Username))
	clear(plain)
	if err != nil {
		return nil, fmt.Errorf("seal credential: %w", err)
	}
	cred := &store.Credential{Owner: owner, SystemID: id, Username: req.Username, KeyType: pub.Type(),
		PublicKeyFingerprint: fingerprint(pub), Certificate: req.Certificate, Sealed: sealed}
	if err := s.deps.Store.PutCredential(r.Context(), cred); err != nil {
		return nil, err
	}
	s.deps.Pool.Forget(access.PoolSystem(owner, id))
	s.access.Forget(owner, id) // the replaced key is parsed no more
	if err := s.audit(r, "credential.put", id, cred.Username+" "+cred.PublicKeyFingerprint); err != nil {
		return nil, err
	}
	return cred, nil
}

func (s *Server) getCredential(w http.ResponseWriter, r *http.Request) error {
	p := principal(r)
	id := r.PathValue("id")
	if _, err := s.deps.Store.GetSystem(r.Context(), p.User, id); err != nil {
		return err
	}
	cred, err := s.deps.Store.GetCredential(r.Context(), p.User, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toCredentialJSON(cred))
	return nil
}

func (s *Server) deleteCredential(w http.ResponseWriter, r *http.Request) error {
	p := principal(r)
	id := r.PathValue("id")
	if _, err := s.deps.Store.GetSystem(r.Context(), p.User, id); err != nil {
		return err
	}
	if err := s.deps.Store.DeleteCredential(r.Context(), p.User, id); err != nil {
		return err
	}
	s.deps.Pool.Forget(access.PoolSystem(p.User, id))
	s.access.Forget(p.User, id)
	if err := s.audit(r, "credential.delete", id, ""); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type checkResult struct {
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
	LatencyMS int64  `json:"latency_ms"`
}

func (s *Server) checkCredential(w http.ResponseWriter, r *http.Request) error {
	owner := principal(r).User
	if sys, err := s.deps.Store.GetSystem(r.Context(), owner, r.PathValue("id")); err == nil && sys.KindOf() == store.KindS3 {
		return s.checkS3Credential(w, r, sys)
	}
	t, _, err := s.target(r.Context(), owner, r.PathValue("id"))
	if err != nil {
		return err
	}
	// Each check dials; rate-limit them per user and per credential (a failed check also trips
	// the pool's circuit breaker for this credential, and the pool caps the user's dials).
	if err := s.limits.allowCheck(owner, t.Key.System+"\x00"+t.Key.User+"\x00"+t.Key.Credential, time.Now()); err != nil {
		return err
	}
	start := time.Now()
	err = s.deps.Pool.Check(r.Context(), t)
	res := checkResult{OK: err == nil, LatencyMS: time.Since(start).Milliseconds()}
	if err != nil {
		res.Error = err.Error()
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
