package sshpool

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/crypto/ssh"
)

// HostKeyError reports a host key that matches none of the system's registered keys.
type HostKeyError struct {
	// Got is the fingerprint the server presented.
	Got string
	// Want lists what was registered.
	Want []string
}

func (e *HostKeyError) Error() string {
	return fmt.Sprintf("host key %s is not one of the registered keys %v: refusing to authenticate (the server's key changed or this is not the right server)", e.Got, e.Want)
}

// HostKeyPolicy is what a system registered about its host keys.
type HostKeyPolicy struct {
	// Keys are authorized_keys-style lines: "ssh-ed25519 AAAA..." or
	// "@cert-authority ssh-ed25519 AAAA..." for a host CA.
	Keys []string
	// Fingerprints are "SHA256:..." fingerprints of acceptable keys.
	Fingerprints []string
	// TrustOnFirstUse accepts any key when Keys and Fingerprints are both empty and calls Learn
	// with it, so the caller can pin it.
	TrustOnFirstUse bool
	// Learn records a key accepted on first use. It may be nil.
	Learn func(key ssh.PublicKey) error
}

// ParseHostKeys validates authorized_keys-style host key lines.
func ParseHostKeys(lines []string) error {
	for i, l := range lines {
		if _, _, err := parseHostKeyLine(l); err != nil {
			return fmt.Errorf("host_keys[%d]: %w", i, err)
		}
	}
	return nil
}

func parseHostKeyLine(line string) (ssh.PublicKey, bool, error) {
	line = strings.TrimSpace(line)
	ca := false
	if rest, ok := strings.CutPrefix(line, "@cert-authority"); ok {
		ca, line = true, strings.TrimSpace(rest)
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, false, fmt.Errorf("not an OpenSSH public key line: %w", err)
	}
	return key, ca, nil
}

// Callback builds the host key check for a system. Keys are compared exactly; a host certificate
// is accepted when signed by a registered @cert-authority key.
func (h HostKeyPolicy) Callback() (ssh.HostKeyCallback, error) {
	var keys, cas []ssh.PublicKey
	for i, l := range h.Keys {
		k, ca, err := parseHostKeyLine(l)
		if err != nil {
			return nil, fmt.Errorf("host_keys[%d]: %w", i, err)
		}
		if ca {
			cas = append(cas, k)
		} else {
			keys = append(keys, k)
		}
	}
	want := append([]string(nil), h.Fingerprints...)
	for _, k := range append(append([]ssh.PublicKey(nil), keys...), cas...) {
		want = append(want, ssh.FingerprintSHA256(k))
	}
	if len(want) == 0 && !h.TrustOnFirstUse {
		return nil, errors.New("no host key registered and trust on first use not requested")
	}
	plain := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if len(want) == 0 && h.TrustOnFirstUse {
			if h.Learn != nil {
				if err := h.Learn(key); err != nil {
					return fmt.Errorf("record host key on first use: %w", err)
				}
			}
			return nil
		}
		for _, k := range keys {
			if bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
		}
		fp := ssh.FingerprintSHA256(key)
		for _, f := range h.Fingerprints {
			if f == fp {
				return nil
			}
		}
		return &HostKeyError{Got: fp, Want: want}
	}
	if len(cas) == 0 {
		return plain, nil
	}
	checker := &ssh.CertChecker{
		IsHostAuthority: func(auth ssh.PublicKey, address string) bool {
			for _, ca := range cas {
				if bytes.Equal(ca.Marshal(), auth.Marshal()) {
					return true
				}
			}
			return false
		},
		HostKeyFallback: plain,
	}
	return checker.CheckHostKey, nil
}
