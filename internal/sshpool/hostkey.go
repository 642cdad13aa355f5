package sshpool

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// HostKeyError reports a host key that matches none of the system's registered keys.
type HostKeyError struct {
	// Got is the fingerprint the server presented.
	Got string
	// Want lists what was registered (or pinned).
	Want []string
	// Revoked is set when the presented key is listed as @revoked.
	Revoked bool
	// KeyType is the type of the presented key.
	KeyType string
	// TryOtherAlgorithms is set when only fingerprints were registered: the server may have
	// another key that matches, so Dial retries without the presented key's algorithms.
	TryOtherAlgorithms bool
}

func (e *HostKeyError) Error() string {
	if e.Revoked {
		return fmt.Sprintf("host key %s is marked @revoked for this system: refusing to authenticate", e.Got)
	}
	return fmt.Sprintf("host key %s is not one of the registered keys %v: refusing to authenticate (the server's key changed or this is not the right server)", e.Got, e.Want)
}

// HostKeyPolicy is what a system registered about its host keys.
type HostKeyPolicy struct {
	// Keys are known_hosts-style entries as NormalizeHostKeys returns them: "ssh-ed25519 AAAA...",
	// "@cert-authority *.example.org ssh-ed25519 AAAA..." for a host CA, or "@revoked ssh-rsa
	// AAAA..." for a key that must never be accepted.
	Keys []string
	// Fingerprints are "SHA256:..." fingerprints of acceptable keys.
	Fingerprints []string
	// Host and Port are the system's address; a @cert-authority entry applies only when one of
	// its host patterns matches them (as OpenSSH matches known_hosts patterns).
	Host string
	Port int
	// TrustOnFirstUse accepts a key when Keys and Fingerprints are both empty, provided Learn
	// accepts it: Learn must pin the key with a compare-and-set and refuse (return an error)
	// when another key was pinned first, so no second key is ever trusted.
	TrustOnFirstUse bool
	// Learn records (or checks against an existing pin) a key presented on first use. It is
	// required with TrustOnFirstUse.
	Learn func(key ssh.PublicKey) error
}

// hostKeyEntry is one parsed known_hosts entry.
type hostKeyEntry struct {
	marker string   // "", "cert-authority" or "revoked"
	hosts  []string // patterns; empty means "this system"
	key    ssh.PublicKey
}

// NormalizeHostKeys parses host key entries as users paste them — ssh-keyscan output with or
// without the leading host field, hashed host names, "@cert-authority" and "@revoked" lines with
// host patterns, several lines in one entry, comments and blank lines — and returns one canonical
// line per key ("[@marker patterns ]type base64"). A plain key's host field is dropped: the key
// is bound to the system it is registered for. Errors name the entry.
func NormalizeHostKeys(entries []string) ([]string, error) {
	parsed, err := parseHostKeyEntries(entries)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(parsed))
	for i, e := range parsed {
		out[i] = e.String()
	}
	return out, nil
}

// parseHostKeyEntries parses host key entries (see NormalizeHostKeys) into one hostKeyEntry per
// key.
func parseHostKeyEntries(entries []string) ([]hostKeyEntry, error) {
	var out []hostKeyEntry
	for i, e := range entries {
		n := 0
		for _, line := range strings.Split(e, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			ke, err := parseHostKeyLine(line)
			if err != nil {
				return nil, fmt.Errorf("host_keys[%d]: %w", i, err)
			}
			out = append(out, ke)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("host_keys[%d]: no key in the entry", i)
		}
	}
	return out, nil
}

func (e hostKeyEntry) String() string {
	k := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(e.key)))
	switch {
	case e.marker == "":
		return k
	case len(e.hosts) == 0:
		return "@" + e.marker + " " + k
	}
	return "@" + e.marker + " " + strings.Join(e.hosts, ",") + " " + k
}

// parseHostKeyLine reads "type base64 [comment]" or a full known_hosts line
// "[@marker] hosts type base64 [comment]".
func parseHostKeyLine(line string) (hostKeyEntry, error) {
	if !strings.HasPrefix(line, "@") {
		if key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
			return hostKeyEntry{key: key}, nil
		}
	}
	marker, hosts, key, _, _, err := ssh.ParseKnownHosts([]byte(line))
	if errors.Is(err, io.EOF) || (err == nil && key == nil) {
		return hostKeyEntry{}, errors.New("no key in the line")
	}
	if err != nil {
		// A marker without host patterns ("@cert-authority ssh-ed25519 AAAA...").
		if m, rest, ok := strings.Cut(line, " "); ok && strings.HasPrefix(m, "@") {
			if key, _, _, _, kerr := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(rest))); kerr == nil {
				marker = strings.TrimPrefix(m, "@")
				if marker != "cert-authority" && marker != "revoked" {
					return hostKeyEntry{}, fmt.Errorf("unknown marker @%s (want @cert-authority or @revoked)", marker)
				}
				return hostKeyEntry{marker: marker, key: key}, nil
			}
		}
		return hostKeyEntry{}, fmt.Errorf("not a known_hosts or OpenSSH public key line: %w", err)
	}
	if marker != "" && marker != "cert-authority" && marker != "revoked" {
		return hostKeyEntry{}, fmt.Errorf("unknown marker @%s (want @cert-authority or @revoked)", marker)
	}
	e := hostKeyEntry{marker: marker, key: key}
	if marker != "" {
		e.hosts = hosts
	}
	return e, nil
}

// policyKeys is a HostKeyPolicy's entries sorted by role.
type policyKeys struct {
	keys, cas, revoked []ssh.PublicKey
}

func (h HostKeyPolicy) parse() (policyKeys, error) {
	var pk policyKeys
	entries, err := parseHostKeyEntries(h.Keys)
	if err != nil {
		return pk, err
	}
	for _, e := range entries {
		switch e.marker {
		case "revoked":
			pk.revoked = append(pk.revoked, e.key)
		case "cert-authority":
			if len(e.hosts) == 0 || matchHostPatterns(e.hosts, h.Host, h.Port) {
				pk.cas = append(pk.cas, e.key)
			}
		default:
			pk.keys = append(pk.keys, e.key)
		}
	}
	return pk, nil
}

// Algorithms returns the host-key algorithms to offer, in order of preference, so that the
// server presents a key that was registered: the registered keys' types (RSA as rsa-sha2-512 and
// rsa-sha2-256), and with a host CA every certificate algorithm. Nil (x/crypto's defaults, any
// algorithm) when fingerprints are registered or nothing is (trust on first use).
func (h HostKeyPolicy) Algorithms() ([]string, error) {
	pk, err := h.parse()
	if err != nil {
		return nil, err
	}
	return h.algorithms(pk), nil
}

func (h HostKeyPolicy) algorithms(pk policyKeys) []string {
	if len(h.Fingerprints) > 0 || len(pk.keys)+len(pk.cas) == 0 {
		// Any type: OpenSSH's order of preference (and so the key an OpenSSH user would have
		// pinned on first use); with fingerprints Dial moves on to the next type on a mismatch.
		return append([]string(nil), anyHostKeyAlgorithms...)
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, x := range a {
			if !seen[x] {
				seen[x] = true
				algos = append(algos, x)
			}
		}
	}
	if len(pk.cas) > 0 {
		add(ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01,
			ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01)
	}
	for _, k := range pk.keys {
		if k.Type() == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256)
			continue
		}
		add(k.Type())
	}
	return algos
}

// Callback builds the host key check for a system. Keys are compared exactly; a host certificate
// is accepted when signed by a registered @cert-authority key whose host patterns match and when
// it is valid for the host; a @revoked key is always refused.
func (h HostKeyPolicy) Callback() (ssh.HostKeyCallback, error) {
	pk, err := h.parse()
	if err != nil {
		return nil, err
	}
	return h.callback(pk)
}

func (h HostKeyPolicy) callback(pk policyKeys) (ssh.HostKeyCallback, error) {
	want := append([]string(nil), h.Fingerprints...)
	for _, k := range append(append([]ssh.PublicKey(nil), pk.keys...), pk.cas...) {
		want = append(want, ssh.FingerprintSHA256(k))
	}
	tofu := len(want) == 0 && h.TrustOnFirstUse
	if len(want) == 0 && !tofu {
		return nil, errors.New("no host key registered and trust on first use not requested")
	}
	if tofu && h.Learn == nil {
		return nil, errors.New("trust on first use needs a way to pin the key")
	}
	isRevoked := func(key ssh.PublicKey) bool {
		for _, r := range pk.revoked {
			if bytes.Equal(r.Marshal(), key.Marshal()) {
				return true
			}
		}
		return false
	}
	plain := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		fp := ssh.FingerprintSHA256(key)
		if isRevoked(key) {
			return &HostKeyError{Got: fp, Want: want, Revoked: true}
		}
		if tofu {
			return h.Learn(key) // pins with a compare-and-set, or checks the key pinned first
		}
		for _, k := range pk.keys {
			if bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
		}
		for _, f := range h.Fingerprints {
			if f == fp {
				return nil
			}
		}
		return &HostKeyError{Got: fp, Want: want, KeyType: key.Type(), TryOtherAlgorithms: len(pk.keys) == 0 && len(pk.cas) == 0}
	}
	if len(pk.cas) == 0 {
		return plain, nil
	}
	checker := &ssh.CertChecker{
		IsHostAuthority: func(auth ssh.PublicKey, address string) bool {
			for _, ca := range pk.cas {
				if bytes.Equal(ca.Marshal(), auth.Marshal()) {
					return true
				}
			}
			return false
		},
		IsRevoked:       func(c *ssh.Certificate) bool { return isRevoked(c) || isRevoked(c.Key) },
		HostKeyFallback: plain,
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := checker.CheckHostKey(hostname, remote, key)
		if err != nil && !isHostKeyError(err) {
			// The certificate itself was refused (unknown CA, expired, wrong principal):
			// report it with the fingerprints so the caller sees which key was presented.
			return fmt.Errorf("%w (%v)", &HostKeyError{Got: ssh.FingerprintSHA256(key), Want: want}, err)
		}
		return err
	}, nil
}

// anyHostKeyAlgorithms are the plain host-key algorithms offered when any type may match, in
// OpenSSH's order of preference.
var anyHostKeyAlgorithms = []string{ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384,
	ssh.KeyAlgoECDSA521, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}

// withoutKeyType drops the algorithms that would make the server present a key of keyType again.
func withoutKeyType(algos []string, keyType string) []string {
	var out []string
	for _, a := range algos {
		if a == keyType || (keyType == ssh.KeyAlgoRSA && (a == ssh.KeyAlgoRSASHA512 || a == ssh.KeyAlgoRSASHA256)) {
			continue
		}
		out = append(out, a)
	}
	return out
}

func isHostKeyError(err error) bool {
	var hk *HostKeyError
	return errors.As(err, &hk)
}

// matchHostPatterns reports whether host (with port, as known_hosts spells it) matches a
// known_hosts host pattern list: "*" and "?" wildcards, "!" negation, hashed "|1|salt|hash"
// entries, and "[host]:port" for ports other than 22.
func matchHostPatterns(patterns []string, host string, port int) bool {
	names := []string{host}
	if port != 0 && port != 22 {
		names = []string{"[" + host + "]:" + strconv.Itoa(port)}
	}
	matched := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		for _, n := range names {
			if matchHostPattern(p, n) {
				if neg {
					return false
				}
				matched = true
			}
		}
	}
	return matched
}

func matchHostPattern(pattern, name string) bool {
	if strings.HasPrefix(pattern, "|1|") {
		parts := strings.Split(pattern[3:], "|")
		if len(parts) != 2 {
			return false
		}
		salt, err1 := base64.StdEncoding.DecodeString(parts[0])
		sum, err2 := base64.StdEncoding.DecodeString(parts[1])
		if err1 != nil || err2 != nil {
			return false
		}
		m := hmac.New(sha1.New, salt)
		m.Write([]byte(name))
		return hmac.Equal(m.Sum(nil), sum)
	}
	return wildcardMatch(strings.ToLower(pattern), strings.ToLower(name))
}

// wildcardMatch matches OpenSSH's "*" (any run) and "?" (one character) patterns.
func wildcardMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if wildcardMatch(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}

// Apply sets cfg's host-key check and the host-key algorithms it offers from the policy: the one
// place a client config learns which server keys to trust.
func (h HostKeyPolicy) Apply(cfg *ssh.ClientConfig) error {
	pk, err := h.parse()
	if err != nil {
		return err
	}
	cb, err := h.callback(pk)
	if err != nil {
		return err
	}
	cfg.HostKeyCallback, cfg.HostKeyAlgorithms = cb, h.algorithms(pk)
	return nil
}
