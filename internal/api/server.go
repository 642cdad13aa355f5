package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/store"
)

// Config holds the HTTP layer's settings.
type Config struct {
	// MaxBodyBytes caps JSON request bodies (default 1 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes" env:"MAX_BODY_BYTES"`
	// MaxFanout caps how many systems one POST /v1/commands runs on at once (default 32).
	MaxFanout int `yaml:"max_fanout" env:"MAX_FANOUT"`
	// MaxKDFRounds caps the bcrypt KDF rounds of a submitted encrypted OpenSSH key (default 128).
	MaxKDFRounds int `yaml:"max_kdf_rounds" env:"MAX_KDF_ROUNDS"`
	// KeyParseSlots bounds how many submitted private keys are parsed or decrypted at once,
	// server-wide (default 2).
	KeyParseSlots int `yaml:"key_parse_slots" env:"KEY_PARSE_SLOTS"`
	// KeyParseWait bounds the wait for a key parsing slot before 503 (default 5s).
	KeyParseWait time.Duration `yaml:"key_parse_wait" env:"KEY_PARSE_WAIT"`
	// OwnerLimits are each user's shares (see limits.go).
	OwnerLimits `yaml:",inline"`
}

// Pool is what the API needs from the SSH connection pool.
type Pool interface {
	command.Sessions
	SFTP(ctx context.Context, t sshpool.Target) (*sshpool.SharedSFTP, error)
	DedicatedSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error)
	Check(ctx context.Context, t sshpool.Target) error
	Forget(system string)
}

// Verifier authenticates bearer tokens.
type Verifier interface {
	Verify(ctx context.Context, token string) (auth.Principal, error)
}

// Deps are the server's collaborators.
type Deps struct {
	Store    store.Store
	Keyring  *secret.Keyring
	Pool     Pool
	Verifier Verifier
	Log      *slog.Logger
	// Registry receives the HTTP metrics; nil means a private registry.
	Registry *prometheus.Registry
	// Gatherer serves /metrics; defaults to Registry.
	Gatherer prometheus.Gatherer
	Version  string
	// Transfers runs /v1/transfers; nil answers those routes with 503.
	Transfers Transfers
	// Network refuses system hosts the operator's network policy denies (nil: none); the pool
	// enforces the same policy when it dials.
	Network *netpolicy.Policy
}

// Server serves the HTTP API.
type Server struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	reqDuration *prometheus.HistogramVec

	targets sync.Map // targetKey -> sshpool.Target: parsed signers, so keys are decrypted once

	loads chan struct{} // one token per POST /sshapi/v2/load allowed to run at once

	keySlots chan struct{} // one token per submitted private key being parsed (keyparse.go)
	limits   *limits       // per-owner shares
}

// New builds a Server.
func New(cfg Config, d Deps) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxFanout <= 0 {
		cfg.MaxFanout = 32
	}
	if cfg.MaxKDFRounds <= 0 {
		cfg.MaxKDFRounds = defaultMaxKDFRounds
	}
	if cfg.KeyParseSlots <= 0 {
		cfg.KeyParseSlots = defaultKeyParseSlots
	}
	if cfg.KeyParseWait <= 0 {
		cfg.KeyParseWait = defaultKeyParseWait
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Gatherer == nil {
		d.Gatherer = d.Registry
	}
	s := &Server{cfg: cfg, deps: d, log: d.Log, loads: make(chan struct{}, maxConcurrentLoads)}
	s.keySlots = make(chan struct{}, cfg.KeyParseSlots)
	s.limits = newLimits(cfg.OwnerLimits)
	s.reqDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sshapi_http_request_duration_seconds",
		Help:    "HTTP request latency by route and status code.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"route", "code"})
	d.Registry.MustRegister(s.reqDuration)
	return s
}

type targetKey struct {
	owner, system string
	generation    int64
	updated       time.Time
}

// target loads the caller's system and credential and returns how to reach it. Unknown or
// foreign systems are 404; a system without the caller's credential is 409.
func (s *Server) target(ctx context.Context, owner, id string) (sshpool.Target, *store.System, error) {
	return s.targetHop(ctx, owner, id, 0)
}

// targetHop is target for the hop-th system of a jump chain: a system with a jump host gets the
// jump's target (its own credential and host key policy) attached.
func (s *Server) targetHop(ctx context.Context, owner, id string, hop int) (sshpool.Target, *store.System, error) {
	t, sys, err := s.ownTarget(ctx, owner, id)
	if err != nil || sys.Jump == "" {
		return t, sys, err
	}
	if hop >= maxJumpHops {
		return sshpool.Target{}, nil, errStatus(http.StatusConflict, "system %q: its jump hosts form a chain longer than %d or a loop", id, maxJumpHops)
	}
	jt, _, err := s.targetHop(ctx, owner, sys.Jump, hop+1)
	if errors.Is(err, store.ErrNotFound) {
		return sshpool.Target{}, nil, errStatus(http.StatusConflict, "system %q: its jump host %q no longer exists", id, sys.Jump)
	}
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusConflict {
		return sshpool.Target{}, nil, errStatus(http.StatusConflict, "system %q: jump host: %s", id, he.detail)
	}
	if err != nil {
		return sshpool.Target{}, nil, err
	}
	t.Jump = &jt
	return t, sys, nil
}

// ownTarget is the system's own hop, cached by its and its credential's versions.
func (s *Server) ownTarget(ctx context.Context, owner, id string) (sshpool.Target, *store.System, error) {
	sys, err := s.deps.Store.GetSystem(ctx, owner, id)
	if err != nil {
		return sshpool.Target{}, nil, err
	}
	cred, err := s.deps.Store.GetCredential(ctx, owner, id)
	if errors.Is(err, store.ErrNotFound) {
		return sshpool.Target{}, nil, errStatus(http.StatusConflict, "system %q has no credential: PUT /v1/systems/%s/credential first", id, id)
	}
	if err != nil {
		return sshpool.Target{}, nil, err
	}
	if err := storedCertUsable(cred.Certificate, time.Now()); err != nil {
		return sshpool.Target{}, nil, err
	}
	key := targetKey{owner: owner, system: id, generation: cred.Generation, updated: sys.UpdatedAt}
	if t, ok := s.targets.Load(key); ok {
		return t.(sshpool.Target), sys, nil
	}
	t, err := s.buildTarget(sys, cred)
	if err != nil {
		return sshpool.Target{}, nil, err
	}
	// The pool gives each owner a share of the host.
	t.Key.Owner = owner

	s.targets.Range(func(k, _ any) bool { // drop stale versions of this system
		if tk := k.(targetKey); tk.owner == owner && tk.system == id {
			s.targets.Delete(k)
		}
		return true
	})
	s.targets.Store(key, t)
	return t, sys, nil
}

func poolSystem(owner, id string) string { return owner + "/" + id }

func (s *Server) buildTarget(sys *store.System, cred *store.Credential) (sshpool.Target, error) {
	plain, err := s.deps.Keyring.Open(cred.Sealed, credentialAAD(cred.Owner, cred.SystemID, cred.Username))
	if err != nil {
		return sshpool.Target{}, fmt.Errorf("open credential for %s: %w", sys.ID, err)
	}
	signer, err := signerFromSealed(plain, cred.Certificate)
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
		Learn:           func(k ssh.PublicKey) error { return s.learnHostKey(owner, id, k) },
	}
	cfg := &ssh.ClientConfig{User: cred.Username, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}}
	if err := policy.Apply(cfg); err != nil {
		return sshpool.Target{}, errStatus(http.StatusConflict, "system %q: %v", sys.ID, err)
	}
	cfg.Ciphers, cfg.KeyExchanges = sys.Ciphers, sys.KeyExchanges // empty: x/crypto's defaults
	return sshpool.Target{
		Key:         sshpool.Key{System: poolSystem(sys.Owner, sys.ID), User: cred.Username, Credential: cred.PublicKeyFingerprint + "#" + strconv.FormatInt(cred.Generation, 10)},
		Addr:        net.JoinHostPort(sys.Host, strconv.Itoa(sys.Port)),
		Config:      cfg,
		MaxSessions: sys.MaxSessions,
	}, nil
}

// learnHostKey pins a key presented under trust on first use with a compare-and-set, so two
// first connections can never pin two keys, and a connection that raced with the pin (a dial
// already in flight, a re-dial with an older target) is checked against the key that won.
func (s *Server) learnHostKey(owner, id string, k ssh.PublicKey) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
	sys, pinned, err := s.deps.Store.PinHostKey(ctx, owner, id, line)
	if err != nil {
		return fmt.Errorf("pin host key: %w", err)
	}
	if pinned {
		s.log.Info("host key pinned on first use", "owner", owner, "system", id, "fingerprint", ssh.FingerprintSHA256(k))
		return nil
	}
	// Someone pinned (or registered) keys first: this key must be one of them.
	cb, err := sshpool.HostKeyPolicy{Keys: sys.HostKeys, Fingerprints: sys.HostKeyFingerprints, Host: sys.Host, Port: sys.Port}.Callback()
	if err != nil {
		return fmt.Errorf("check against the pinned key: %w", err)
	}
	return cb(sys.Host, nil, k)
}

func credentialAAD(owner, system, username string) []byte {
	return []byte("sshapi-credential\x00" + owner + "\x00" + system + "\x00" + username)
}
