package api

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/slot"
)

// Bounds on the work a submitted private key can cost. An encrypted OpenSSH key names its own
// bcrypt-pbkdf round count, and decrypting costs CPU linear in it (ssh-keygen's default is 16,
// about 0.1 s; x/crypto accepts up to 2048): without a cap and a bound on how many keys are
// decrypted at once, a few requests could occupy every core.
const (
	defaultMaxKDFRounds          = 128
	defaultKeyParseSlots         = 2
	defaultKeyParseSlotsPerOwner = 1
	defaultKeyParseWait          = 5 * time.Second
)

// openSSHKeyMagic opens the binary body of an "OPENSSH PRIVATE KEY" block (PROTOCOL.key).
const openSSHKeyMagic = "openssh-key-v1\x00"

// checkedCredential parses a submitted credential like parseCredential, after refusing an
// encrypted key whose KDF cost exceeds the configured cap, and holding one of the key parsing
// slots (owner's share first, then the server's) while it runs.
func (s *Server) checkedCredential(ctx context.Context, owner string, req putCredentialRequest) ([]byte, ssh.PublicKey, error) {
	if rounds, ok := bcryptRounds([]byte(req.PrivateKey)); ok && rounds > uint64(s.cfg.MaxKDFRounds) {
		return nil, nil, badField("private_key", "is encrypted with %d bcrypt KDF rounds; at most %d are accepted here (re-encrypt it: ssh-keygen -p -a %d -f KEY)",
			rounds, s.cfg.MaxKDFRounds, min(100, s.cfg.MaxKDFRounds))
	}
	release, err := s.keyParseSlot(ctx, owner)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	return parseCredential(req)
}

// keyParseSlot waits for one of owner's key parsing slots and then one of the server's, as long
// as the request's deadline and the configured wait allow. Without a slot it answers 503 with
// Retry-After, saying whether the caller's own keys or everyone's filled them.
func (s *Server) keyParseSlot(ctx context.Context, owner string) (release func(), err error) {
	wait, cancel := context.WithTimeout(ctx, s.cfg.KeyParseWait)
	defer cancel()
	l, err := s.keySlots.Acquire(wait, owner, 1)
	if err == nil {
		return l.Release, nil
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, ctx.Err() // the client went away
	}
	e := errStatus(http.StatusServiceUnavailable, "too many private keys are being checked right now; retry shortly")
	if errors.Is(err, slot.ErrShare) {
		e = errStatus(http.StatusServiceUnavailable, "%d of your private keys are already being checked (the limit per user); retry when they are done", s.keySlots.Share())
	}
	e.retryAfter = 1
	e.err = err
	return nil, e
}

// bcryptRounds reads the bcrypt-pbkdf round count from the header of an encrypted OpenSSH
// private key, without decrypting anything. ok is false for any other key or an unencrypted one;
// malformed input is left to the full parser to reject.
func bcryptRounds(pemBytes []byte) (rounds uint64, ok bool) {
	block, _ := pem.Decode(bytes.TrimSpace(pemBytes))
	if block == nil || block.Type != "OPENSSH PRIVATE KEY" {
		return 0, false
	}
	if !bytes.HasPrefix(block.Bytes, []byte(openSSHKeyMagic)) {
		return 0, false
	}
	var key struct { // the layout x/crypto/ssh reads too
		CipherName, KdfName, KdfOpts string
		Rest                         []byte `ssh:"rest"`
	}
	var opts struct {
		Salt   string
		Rounds uint32
	}
	if ssh.Unmarshal(block.Bytes[len(openSSHKeyMagic):], &key) != nil || key.KdfName != "bcrypt" ||
		ssh.Unmarshal([]byte(key.KdfOpts), &opts) != nil {
		return 0, false
	}
	return uint64(opts.Rounds), true
}
