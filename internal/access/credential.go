package access

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/ssh"
)

// CertUsable reports whether a user certificate is a user certificate valid at now.
func CertUsable(cert *ssh.Certificate, now time.Time) error {
	if cert.CertType != ssh.UserCert {
		return errors.New("is a host certificate, not a user certificate")
	}
	unix := uint64(now.Unix())
	if cert.ValidBefore != ssh.CertTimeInfinity && unix >= cert.ValidBefore {
		return fmt.Errorf("expired at %s", time.Unix(int64(cert.ValidBefore), 0).UTC().Format(time.RFC3339))
	}
	if unix < cert.ValidAfter {
		return fmt.Errorf("is not valid before %s", time.Unix(int64(cert.ValidAfter), 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// storedCertUsable checks a stored credential's certificate before it is used to dial, so an
// expired one fails at once with a clear message instead of as an authentication failure.
func storedCertUsable(line string, now time.Time) error {
	if line == "" {
		return nil
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return fmt.Errorf("stored certificate: %w", err)
	}
	cert, ok := k.(*ssh.Certificate)
	if !ok {
		return errors.New("stored certificate is not a certificate")
	}
	if err := CertUsable(cert, now); err != nil {
		return refuse(ErrCertificate, "the credential's SSH certificate %s: PUT a new one to /v1/systems/{id}/credential", err)
	}
	return nil
}

// CertSigner combines signer with the OpenSSH certificate line certLine.
func CertSigner(signer ssh.Signer, certLine string) (ssh.Signer, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(certLine))
	if err != nil {
		return nil, errors.New("is not an OpenSSH certificate line")
	}
	cert, ok := k.(*ssh.Certificate)
	if !ok {
		return nil, errors.New("is a public key, not a certificate")
	}
	s, err := ssh.NewCertSigner(cert, signer)
	if err != nil {
		return nil, fmt.Errorf("does not match private_key: %w", err)
	}
	return s, nil
}

// signerFromSealed turns an opened credential back into a signer.
func signerFromSealed(plain []byte, certificate string) (ssh.Signer, error) {
	signer, err := ssh.ParsePrivateKey(plain)
	if err != nil {
		return nil, fmt.Errorf("parse stored key: %w", err)
	}
	if certificate != "" {
		return CertSigner(signer, certificate)
	}
	return signer, nil
}
