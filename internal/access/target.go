package access

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/store"
)

// MaxJumpHops bounds a chain of jump hosts (a jump host may itself have one).
const MaxJumpHops = 4

type targetKey struct {
	owner, system string
	generation    int64
	updated       time.Time
}

// PoolSystem is the pool's name for owner's system id.
func PoolSystem(owner, id string) string { return owner + "/" + id }

// Target loads owner's system id and its credential and returns how to reach it, jump hosts
// included. A missing system is store.ErrNotFound; an S3 system a *storage.UnsupportedError
// (no SSH, capability "commands") with the system; a system that cannot be used as configured
// is ErrUnusable; an expired certificate ErrCertificate. It decides nothing about who asks:
// callers resolve a principal's access first (Resolve).
func (r *Resolver) Target(ctx context.Context, owner, id string) (sshpool.Target, *store.System, error) {
	return r.targetHop(ctx, owner, id, 0)
}

// targetHop is Target for the hop-th system of a jump chain: a system with a jump host gets the
// jump's target (its own credential and host key policy) attached.
func (r *Resolver) targetHop(ctx context.Context, owner, id string, hop int) (sshpool.Target, *store.System, error) {
	t, sys, err := r.ownTarget(ctx, owner, id)
	if err != nil || sys.Jump == "" {
		return t, sys, err
	}
	if hop >= MaxJumpHops {
		return sshpool.Target{}, nil, refuse(ErrUnusable, "system %q: its jump hosts form a chain longer than %d or a loop", id, MaxJumpHops)
	}
	jt, _, err := r.targetHop(ctx, owner, sys.Jump, hop+1)
	if errors.Is(err, store.ErrNotFound) {
		return sshpool.Target{}, nil, refuse(ErrUnusable, "system %q: its jump host %q no longer exists", id, sys.Jump)
	}
	if isNotSSH(err) {
		return sshpool.Target{}, nil, refuse(ErrUnusable, "system %q: its jump host %q is an S3 bucket, not an SSH host", id, sys.Jump)
	}
	var ae *Error
	if errors.As(err, &ae) && ae.Kind == ErrUnusable {
		return sshpool.Target{}, nil, refuse(ErrUnusable, "system %q: jump host: %s", id, ae.Detail)
	}
	if err != nil {
		return sshpool.Target{}, nil, err
	}
	t.Jump = &jt
	return t, sys, nil
}

// ownTarget is the system's own hop. The system and its credential are read from the store on
// every call, in one query (store.GetSystemCredential); only the parsed signer built from them
// is kept, under the versions that query just read (see "Concurrency" in the package doc).
func (r *Resolver) ownTarget(ctx context.Context, owner, id string) (sshpool.Target, *store.System, error) {
	sys, cred, err := r.deps.Store.GetSystemCredential(ctx, owner, id)
	if err != nil {
		return sshpool.Target{}, nil, err
	}
	if sys.KindOf() == store.KindS3 {
		return sshpool.Target{}, sys, notSSH(sys)
	}
	if cred == nil {
		return sshpool.Target{}, nil, refuse(ErrUnusable, "system %q has no credential: PUT /v1/systems/%s/credential first", id, id)
	}
	if err := storedCertUsable(cred.Certificate, time.Now()); err != nil {
		return sshpool.Target{}, nil, err
	}
	key := targetKey{owner: owner, system: id, generation: cred.Generation, updated: sys.UpdatedAt}
	if v, ok := r.derived.get(key, time.Now()); ok {
		if t, ok := v.(sshpool.Target); ok {
			return t, sys, nil
		}
	}
	t, err := r.buildTarget(sys, cred)
	if err != nil {
		return sshpool.Target{}, nil, err
	}
	// The pool gives each owner a share of the host.
	t.Key.Owner = owner
	r.derived.put(key, t, time.Now()) // in place of any older version of this system
	return t, sys, nil
}

func (r *Resolver) buildTarget(sys *store.System, cred *store.Credential) (sshpool.Target, error) {
	plain, err := r.deps.Keyring.Open(cred.Sealed, CredentialAAD(cred.Owner, cred.SystemID, cred.Username))
	if err != nil {
		return sshpool.Target{}, fmt.Errorf("open credential for %s: %w", sys.ID, err)
	}
	signer, err := signerFromSealed(plain, cred.Certificate)
	clear(plain)
	if err != nil {
		return sshpool.Target{}, fmt.Errorf("stored credential for %s: %w", sys.ID, err)
	}
	owner, id := sys.Owner, sys.ID
	policy := sshpool.HostKeyPolicy{
		Keys:            sys.HostKeys,
		Fingerprints:    sys.HostKeyFingerprints,
		Host:            sys.Host,
		Port:            sys.Port,
		TrustOnFirstUse: sys.TrustOnFirstUse,
		Learn:           func(k ssh.PublicKey) error { return r.LearnHostKey(owner, id, k) },
	}
	cfg := &ssh.ClientConfig{User: cred.Username, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}}
	if err := policy.Apply(cfg); err != nil {
		return sshpool.Target{}, refuse(ErrUnusable, "system %q: %v", sys.ID, err)
	}
	cfg.Ciphers, cfg.KeyExchanges = sys.Ciphers, sys.KeyExchanges // empty: x/crypto's defaults
	return sshpool.Target{
		Key:         sshpool.Key{System: PoolSystem(sys.Owner, sys.ID), User: cred.Username, Credential: cred.PublicKeyFingerprint + "#" + strconv.FormatInt(cred.Generation, 10)},
		Addr:        net.JoinHostPort(sys.Host, strconv.Itoa(sys.Port)),
		Config:      cfg,
		MaxSessions: sys.MaxSessions,
	}, nil
}

// LearnHostKey pins a key presented under trust on first use with a compare-and-set, so two
// first connections can never pin two keys, and a connection that raced with the pin (a dial
// already in flight, a re-dial with an older target) is checked against the key that won.
func (r *Resolver) LearnHostKey(owner, id string, k ssh.PublicKey) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
	sys, pinned, err := r.deps.Store.PinHostKey(ctx, owner, id, line)
	if err != nil {
		return fmt.Errorf("pin host key: %w", err)
	}
	if pinned {
		r.log.Info("host key pinned on first use", "owner", owner, "system", id, "fingerprint", ssh.FingerprintSHA256(k))
		return nil
	}
	// Someone pinned (or registered) keys first: this key must be one of them.
	cb, err := sshpool.HostKeyPolicy{Keys: sys.HostKeys, Fingerprints: sys.HostKeyFingerprints, Host: sys.Host, Port: sys.Port}.Callback()
	if err != nil {
		return fmt.Errorf("check against the pinned key: %w", err)
	}
	return cb(sys.Host, nil, k)
}

// CredentialAAD binds a sealed credential to its owner, system and remote user.
func CredentialAAD(owner, system, username string) []byte {
	return []byte("sshapi-credential\x00" + owner + "\x00" + system + "\x00" + username)
}
