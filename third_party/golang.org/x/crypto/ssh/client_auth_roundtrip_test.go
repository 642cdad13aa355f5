// Copyright 2026 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package ssh

// sshapi patch: the client skips the "none" probe with an OpenSSH server when its first method
// is publickey, and sends a single key signed at once. These tests run the client against a
// scripted server that answers user authentication requests as OpenSSH's sshd does and records
// each request the client sends.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// scriptedSSHD answers RFC 4252 requests as sshd would with AuthenticationMethods steps: each
// step is a list of methods any one of which completes it; keys are the accepted keys and
// password the accepted password.
type scriptedSSHD struct {
	version  string
	steps    [][]string
	keys     []PublicKey
	password string
	banner   string
	sigAlgs  []string // server-sig-algs; default: the package's defaults
	refuse   []string // public key algorithms refused although announced (OpenSSH 7.2-7.7 with RSA certificates)
	// pipelined: the client must send its first authentication request before it has the
	// service accept, which the server sends only then (a client that waits for it fails on
	// its connection's deadline).
	pipelined bool
}

// run serves one connection and returns the requests it saw, as "none", "password",
// "publickey?ALGO" (a query) or "publickey!ALGO" (signed).
func (s *scriptedSSHD) run(c net.Conn) ([]string, error) {
	config := &ServerConfig{}
	config.SetDefaults()
	config.AddHostKey(testSigners["ecdsa"])
	config.PublicKeyAuthAlgorithms = s.sigAlgs
	if len(config.PublicKeyAuthAlgorithms) == 0 {
		config.PublicKeyAuthAlgorithms = defaultPubKeyAuthAlgos
	}
	clientVersion, err := exchangeVersions(c, []byte(s.version))
	if err != nil {
		return nil, err
	}
	tr := newServerTransport(newTransport(c, config.Rand, false), clientVersion, []byte(s.version), config)
	defer tr.Close()
	if err := tr.waitSession(); err != nil {
		return nil, err
	}
	sessionID := tr.getSessionID()
	packet, err := tr.readPacket()
	if err != nil {
		return nil, err
	}
	var sr serviceRequestMsg
	if err := Unmarshal(packet, &sr); err != nil || sr.Service != serviceUserAuth {
		return nil, fmt.Errorf("want a service request for %s, got %v (%v)", serviceUserAuth, packet, err)
	}
	accept := func() error { return tr.writePacket(Marshal(&serviceAcceptMsg{Service: serviceUserAuth})) }
	if !s.pipelined {
		if err := accept(); err != nil {
			return nil, err
		}
	}
	var seen []string
	step := 0
	bannerSent := false
	for {
		packet, err := tr.readPacket()
		if err != nil {
			return seen, err
		}
		if s.pipelined && len(seen) == 0 {
			if err := accept(); err != nil {
				return nil, err
			}
		}
		var req userAuthRequestMsg
		if err := Unmarshal(packet, &req); err != nil {
			return seen, err
		}
		if s.banner != "" && !bannerSent {
			bannerSent = true
			if err := tr.writePacket(Marshal(&userAuthBannerMsg{Message: s.banner})); err != nil {
				return seen, err
			}
		}
		allowed := slices.Contains(s.steps[step], req.Method)
		passed := false
		switch req.Method {
		case "none":
			seen = append(seen, "none")
		case "password":
			seen = append(seen, "password")
			var pw struct {
				Reply    bool
				Password string
			}
			if err := Unmarshal(req.Payload, &pw); err != nil {
				return seen, err
			}
			passed = allowed && pw.Password == s.password
		case "publickey":
			var pk struct {
				HasSig  bool
				Algo    string
				PubKey  []byte
				SigRest []byte `ssh:"rest"`
			}
			if err := Unmarshal(req.Payload, &pk); err != nil {
				return seen, err
			}
			key, err := ParsePublicKey(pk.PubKey)
			if err != nil {
				return seen, err
			}
			known := slices.ContainsFunc(s.keys, func(k PublicKey) bool { return bytes.Equal(k.Marshal(), key.Marshal()) })
			algoOK := slices.Contains(config.PublicKeyAuthAlgorithms, underlyingAlgo(pk.Algo)) && !slices.Contains(s.refuse, pk.Algo)
			if !pk.HasSig {
				seen = append(seen, "publickey?"+pk.Algo)
				if allowed && known && algoOK {
					if err := tr.writePacket(Marshal(&userAuthPubKeyOkMsg{Algo: pk.Algo, PubKey: pk.PubKey})); err != nil {
						return seen, err
					}
					continue
				}
				break
			}
			seen = append(seen, "publickey!"+pk.Algo)
			sig, rest, ok := parseSignature(pk.SigRest)
			if !ok || len(rest) > 0 {
				return seen, errors.New("bad signature encoding")
			}
			data := buildDataSignedForAuth(sessionID, userAuthRequestMsg{User: req.User, Service: req.Service, Method: req.Method}, pk.Algo, pk.PubKey)
			if sig.Format != underlyingAlgo(pk.Algo) {
				return seen, fmt.Errorf("signature format %s for algorithm %s", sig.Format, pk.Algo)
			}
			if err := key.Verify(data, sig); err != nil {
				return seen, fmt.Errorf("signature of the %s request: %w", pk.Algo, err)
			}
			passed = allowed && known && algoOK
		default:
			seen = append(seen, req.Method)
		}
		if passed {
			step++
			if step == len(s.steps) {
				return seen, tr.writePacket([]byte{msgUserAuthSuccess})
			}
		}
		if err := tr.writePacket(Marshal(&userAuthFailureMsg{Methods: s.steps[step], PartialSuccess: passed})); err != nil {
			return seen, err
		}
	}
}

func TestClientAuthRoundTrips(t *testing.T) {
	const openssh = "SSH-2.0-OpenSSH_9.6p1 Debian-3"
	ed, rsa, ecdsa, cert := testSigners["ed25519"], testSigners["rsa"], testSigners["ecdsa"], testSigners["cert"]
	rsaCert := &Certificate{Key: rsa.PublicKey(), CertType: UserCert, ValidPrincipals: []string{"u"}, ValidBefore: CertTimeInfinity}
	if err := rsaCert.SignCert(rand.Reader, ecdsa); err != nil {
		t.Fatal(err)
	}
	rsaCertSigner, err := NewCertSigner(rsaCert, rsa)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		server  scriptedSSHD
		auth    []AuthMethod
		want    []string
		wantErr string
	}{{
		name:   "one key, OpenSSH: one signed request, no probe",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey", "password"}}, keys: []PublicKey{ed.PublicKey()}},
		auth:   []AuthMethod{PublicKeys(ed)},
		want:   []string{"publickey!ssh-ed25519"},
	}, {
		name:   "one RSA key: the algorithm from server-sig-algs",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey"}}, keys: []PublicKey{rsa.PublicKey()}, sigAlgs: []string{KeyAlgoRSASHA256, KeyAlgoED25519}},
		auth:   []AuthMethod{PublicKeys(rsa)},
		want:   []string{"publickey!" + KeyAlgoRSASHA256},
	}, {
		name:   "one key, another server: the probe, then one signed request",
		server: scriptedSSHD{version: "SSH-2.0-Go", steps: [][]string{{"publickey"}}, keys: []PublicKey{ed.PublicKey()}},
		auth:   []AuthMethod{PublicKeys(ed)},
		want:   []string{"none", "publickey!ssh-ed25519"},
	}, {
		name:   "two keys: each queried before the accepted one is signed",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey"}}, keys: []PublicKey{ed.PublicKey()}},
		auth:   []AuthMethod{PublicKeys(ecdsa, ed)},
		want:   []string{"publickey?" + ecdsa.PublicKey().Type(), "publickey?ssh-ed25519", "publickey!ssh-ed25519"},
	}, {
		name:   "refused key, then the password",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey", "password"}}, keys: []PublicKey{ecdsa.PublicKey()}, password: "pw"},
		auth:   []AuthMethod{PublicKeys(ed), Password("pw")},
		want:   []string{"publickey!ssh-ed25519", "password"},
	}, {
		name:    "refused key, nothing else",
		server:  scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey", "password"}}, keys: []PublicKey{ecdsa.PublicKey()}},
		auth:    []AuthMethod{PublicKeys(ed)},
		want:    []string{"publickey!ssh-ed25519"},
		wantErr: "unable to authenticate",
	}, {
		name:   "AuthenticationMethods publickey,password",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey"}, {"password"}}, keys: []PublicKey{ed.PublicKey()}, password: "pw"},
		auth:   []AuthMethod{PublicKeys(ed), Password("pw")},
		want:   []string{"publickey!ssh-ed25519", "password"},
	}, {
		name:   "AuthenticationMethods password,publickey: the key again after the password",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"password"}, {"publickey"}}, keys: []PublicKey{ed.PublicKey()}, password: "pw"},
		auth:   []AuthMethod{PublicKeys(ed), Password("pw")},
		want:   []string{"publickey!ssh-ed25519", "none", "password", "publickey!ssh-ed25519"},
	}, {
		name:   "password first in the client's list: the probe as before",
		server: scriptedSSHD{version: openssh, steps: [][]string{{"publickey", "password"}}, password: "pw"},
		auth:   []AuthMethod{Password("pw"), PublicKeys(ed)},
		want:   []string{"none", "password"},
	}, {
		name:   "certificate",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey"}}, keys: []PublicKey{cert.PublicKey()}},
		auth:   []AuthMethod{PublicKeys(cert)},
		want:   []string{"publickey!" + cert.PublicKey().Type()},
	}, {
		name: "RSA certificate refused with rsa-sha2-256 (OpenSSH 7.2-7.7): again with ssh-rsa",
		server: scriptedSSHD{pipelined: true, version: "SSH-2.0-OpenSSH_7.4", steps: [][]string{{"publickey"}}, keys: []PublicKey{rsaCertSigner.PublicKey()},
			sigAlgs: []string{KeyAlgoRSASHA256, KeyAlgoRSA}, refuse: []string{CertAlgoRSASHA256v01}},
		auth: []AuthMethod{PublicKeys(rsaCertSigner)},
		want: []string{"publickey!" + CertAlgoRSASHA256v01, "publickey?" + CertAlgoRSAv01, "publickey!" + CertAlgoRSAv01},
	}, {
		name:   "banner before the first answer",
		server: scriptedSSHD{pipelined: true, version: openssh, steps: [][]string{{"publickey"}}, keys: []PublicKey{ed.PublicKey()}, banner: "welcome\n"},
		auth:   []AuthMethod{PublicKeys(ed)},
		want:   []string{"publickey!ssh-ed25519"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c1, c2, err := netPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			defer c2.Close()
			if err := c2.SetDeadline(time.Now().Add(20 * time.Second)); err != nil { // a hang fails
				t.Fatal(err)
			}
			type result struct {
				seen []string
				err  error
			}
			done := make(chan result, 1)
			go func() {
				seen, err := tt.server.run(c1)
				c1.Close()
				done <- result{seen, err}
			}()
			var banners []string
			_, _, _, err = NewClientConn(c2, "", &ClientConfig{
				User:            "u",
				Auth:            tt.auth,
				HostKeyCallback: InsecureIgnoreHostKey(),
				BannerCallback:  func(m string) error { banners = append(banners, m); return nil },
			})
			c2.Close()
			r := <-done
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("login: %v (server: %v)", err, r.err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("login: got %v, want an error with %q", err, tt.wantErr)
			case tt.wantErr == "" && r.err != nil:
				t.Fatalf("server: %v", r.err)
			}
			if !slices.Equal(r.seen, tt.want) {
				t.Errorf("requests: got %q, want %q", r.seen, tt.want)
			}
			if tt.server.banner != "" && !slices.Equal(banners, []string{tt.server.banner}) {
				t.Errorf("banners: got %q, want %q", banners, tt.server.banner)
			}
		})
	}
}

// TestClientAuthOpenSSHFallbacks: with the probe skipped (the server here is this package's,
// announcing itself as OpenSSH), a refused key still falls back to keyboard-interactive and to
// a password, a certificate logs in, and a key that only partly succeeds is followed by the
// method the server asks for next.
func TestClientAuthOpenSSHFallbacks(t *testing.T) {
	answers := keyboardInteractive(map[string]string{"question1": "answer1", "question2": "answer2"})
	refused := testSigners["ed25519"]
	cert := &Certificate{Key: testPublicKeys["ecdsa"], CertType: UserCert, ValidPrincipals: []string{"testuser"}, ValidBefore: CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, testSigners["rsa"]); err != nil {
		t.Fatal(err)
	}
	certSigner, err := NewCertSigner(cert, testSigners["ecdsa"])
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		auth    []AuthMethod
		want    []string // methods the server logged, in order
		partial bool     // the key only partly succeeds; a password must follow
	}{
		{"refused key, keyboard-interactive", []AuthMethod{PublicKeys(refused), KeyboardInteractive(answers.Challenge)}, []string{"publickey", "keyboard-interactive"}, false},
		{"refused key, password", []AuthMethod{PublicKeys(refused), Password(clientPassword)}, []string{"publickey", "password"}, false},
		{"accepted key", []AuthMethod{PublicKeys(testSigners["rsa"])}, []string{"publickey"}, false},
		{"certificate", []AuthMethod{PublicKeys(certSigner)}, []string{"publickey"}, false},
		{"key, then the password", []AuthMethod{PublicKeys(testSigners["rsa"]), Password(clientPassword)}, []string{"publickey", "password"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c1, c2, err := netPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			defer c2.Close()
			certChecker := CertChecker{
				IsUserAuthority: func(k PublicKey) bool { return bytes.Equal(k.Marshal(), testPublicKeys["rsa"].Marshal()) },
				UserKeyFallback: func(conn ConnMetadata, key PublicKey) (*Permissions, error) {
					if bytes.Equal(key.Marshal(), testPublicKeys["rsa"].Marshal()) {
						if tt.partial {
							return nil, &PartialSuccessError{Next: ServerAuthCallbacks{
								PasswordCallback: func(conn ConnMetadata, pass []byte) (*Permissions, error) {
									if string(pass) == clientPassword {
										return nil, nil
									}
									return nil, errors.New("wrong password")
								},
							}}
						}
						return nil, nil
					}
					return nil, errors.New("refused")
				},
			}
			var logged []string
			config := &ServerConfig{
				ServerVersion:     "SSH-2.0-OpenSSH_9.6",
				PublicKeyCallback: certChecker.Authenticate,
				PasswordCallback: func(conn ConnMetadata, pass []byte) (*Permissions, error) {
					if string(pass) == clientPassword {
						return nil, nil
					}
					return nil, errors.New("wrong password")
				},
				KeyboardInteractiveCallback: func(conn ConnMetadata, challenge KeyboardInteractiveChallenge) (*Permissions, error) {
					ans, err := challenge("user", "instruction", []string{"question1", "question2"}, []bool{true, true})
					if err != nil || ans[0] != "answer1" || ans[1] != "answer2" {
						return nil, errors.New("keyboard-interactive failed")
					}
					return nil, nil
				},
				AuthLogCallback: func(conn ConnMetadata, method string, err error) { logged = append(logged, method) },
			}
			config.AddHostKey(testSigners["ecdsa"])
			done := make(chan error, 1)
			go func() { _, err := newServer(c1, config); done <- err }()
			if _, _, _, err := NewClientConn(c2, "", &ClientConfig{User: "testuser", Auth: tt.auth, HostKeyCallback: InsecureIgnoreHostKey()}); err != nil {
				t.Fatalf("login: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v", err)
			}
			if !slices.Equal(logged, tt.want) {
				t.Errorf("server saw %q, want %q", logged, tt.want)
			}
		})
	}
}
