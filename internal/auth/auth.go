// Package auth authenticates API callers by bearer JSON Web Token and
// carries the result, a Principal, in the request context.
//
// Two token sources are supported, alone or together: HS256 tokens signed
// with a shared secret (the development setup, see IssueHS256), and RS256 or
// ES256 tokens from an OpenID Connect provider, verified against its JSON Web
// Key Set (JWKS), which is refreshed in the background. Every token must
// carry an expiry and a subject; the subject becomes Principal.User.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrUnauthenticated is wrapped by every error from Verify. The rest of the
// message says why (expired, bad signature, missing exp, ...) and never
// contains the token.
var ErrUnauthenticated = errors.New("unauthenticated")

// Leeway is the clock skew tolerated when checking exp, nbf and iat.
const Leeway = 30 * time.Second

// MinHS256SecretSize is the shortest accepted HS256 secret, in bytes.
const MinHS256SecretSize = 32

// maxSubjectLen bounds the sub claim, which becomes the owner key in the
// store.
const maxSubjectLen = 256

// Principal is the authenticated caller.
type Principal struct {
	// User is the token's subject (sub claim).
	User string
}

type principalKey struct{}

// WithPrincipal returns a copy of ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal stored by WithPrincipal, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Config selects the token sources a Verifier accepts. At least one of
// HS256Secret and JWKSURL must be set.
type Config struct {
	// HS256Secret, if set, accepts HS256 tokens signed with it (at least
	// MinHS256SecretSize bytes).
	HS256Secret []byte
	// JWKSURL, if set, accepts RS256 and ES256 tokens signed by a key in the
	// JSON Web Key Set served there (an OIDC provider's jwks_uri).
	JWKSURL string
	// Issuer, if set, must equal the token's iss claim.
	Issuer string
	// Audience, if set, must be among the token's aud claim.
	Audience string
	// JWKSRefresh is how often the key set is re-fetched in the background;
	// 0 means one hour. A token with an unknown key id also triggers a
	// fetch, at most once per JWKSMinRefresh.
	JWKSRefresh time.Duration
	// JWKSMinRefresh is the shortest interval between two fetches of the
	// key set; 0 means one minute.
	JWKSMinRefresh time.Duration
	// HTTPClient fetches the key set; nil means a client with a 10 s
	// timeout.
	HTTPClient *http.Client
}

// Option adjusts the Config built by NewHS256Verifier.
type Option func(*Config)

// WithIssuer requires the iss claim to equal iss.
func WithIssuer(iss string) Option { return func(c *Config) { c.Issuer = iss } }

// WithAudience requires the aud claim to contain aud.
func WithAudience(aud string) Option { return func(c *Config) { c.Audience = aud } }

// Verifier checks bearer tokens. It is safe for concurrent use. A Verifier
// with a JWKS source owns a refresh goroutine; Close stops it.
type Verifier struct {
	secret  []byte
	jwks    *jwks // nil without JWKSURL
	parser  *jwt.Parser
	methods []string
}

// NewHS256Verifier returns a Verifier that accepts only HS256 tokens signed
// with secret. It starts no goroutine.
func NewHS256Verifier(secret []byte, opts ...Option) (*Verifier, error) {
	cfg := Config{HS256Secret: secret}
	for _, o := range opts {
		o(&cfg)
	}
	return newVerifier(cfg, nil)
}

// New returns a Verifier for cfg. With a JWKSURL it fetches the key set once
// using ctx, failing if that fetch fails, and then starts a goroutine that
// refreshes it until Close.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	var keys *jwks
	if cfg.JWKSURL != "" {
		var err error
		if keys, err = startJWKS(ctx, cfg); err != nil {
			return nil, err
		}
	}
	v, err := newVerifier(cfg, keys)
	if err != nil && keys != nil {
		keys.close()
	}
	return v, err
}

func newVerifier(cfg Config, keys *jwks) (*Verifier, error) {
	v := &Verifier{jwks: keys}
	if cfg.HS256Secret != nil {
		if len(cfg.HS256Secret) < MinHS256SecretSize {
			return nil, fmt.Errorf("auth: HS256 secret is %d bytes, want at least %d", len(cfg.HS256Secret), MinHS256SecretSize)
		}
		v.secret = append([]byte(nil), cfg.HS256Secret...)
		v.methods = append(v.methods, jwt.SigningMethodHS256.Alg())
	}
	if keys != nil {
		v.methods = append(v.methods, jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg())
	}
	if len(v.methods) == 0 {
		return nil, errors.New("auth: no token source configured: set an HS256 secret or a JWKS URL")
	}
	popts := []jwt.ParserOption{
		jwt.WithValidMethods(v.methods),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(Leeway),
	}
	if cfg.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		popts = append(popts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(popts...)
	return v, nil
}

// Close stops the JWKS refresh goroutine, if any, and waits for it.
func (v *Verifier) Close() error {
	if v.jwks != nil {
		v.jwks.close()
	}
	return nil
}

// Verify checks token (without any "Bearer " prefix) and returns its
// Principal. Errors wrap ErrUnauthenticated.
func (v *Verifier) Verify(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("%w: no token", ErrUnauthenticated)
	}
	claims := &jwt.RegisteredClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		return v.key(ctx, t)
	})
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %s", ErrUnauthenticated, reason(err))
	}
	switch {
	case claims.Subject == "":
		return Principal{}, fmt.Errorf("%w: token has no sub claim", ErrUnauthenticated)
	case len(claims.Subject) > maxSubjectLen:
		return Principal{}, fmt.Errorf("%w: sub claim longer than %d bytes", ErrUnauthenticated, maxSubjectLen)
	case strings.ContainsFunc(claims.Subject, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return Principal{}, fmt.Errorf("%w: sub claim contains control characters", ErrUnauthenticated)
	}
	return Principal{User: claims.Subject}, nil
}

// key returns the verification key for t, chosen by its algorithm so that a
// key of one kind is never used with another kind's algorithm.
func (v *Verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	switch t.Method.Alg() {
	case jwt.SigningMethodHS256.Alg():
		if v.secret == nil {
			return nil, errors.New("HS256 tokens are not accepted")
		}
		return v.secret, nil
	case jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg():
		if v.jwks == nil {
			return nil, fmt.Errorf("%s tokens are not accepted", t.Method.Alg())
		}
		kid, _ := t.Header["kid"].(string)
		// lookup returns only keys whose type fits the algorithm.
		return v.jwks.lookup(ctx, kid, t.Method.Alg())
	default:
		return nil, fmt.Errorf("algorithm %q is not accepted", t.Method.Alg())
	}
}

// reason turns a jwt error into a short explanation without token contents.
func reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token issued in the future"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	default:
		// Missing claims ("exp claim is required"), signature errors (a bad
		// signature or an algorithm not accepted) and key lookup errors name
		// at most a claim, the algorithm and the key id, never token
		// contents.
		return err.Error()
	}
}

// IssueHS256 returns an HS256 token for user, issued at now and expiring
// after ttl, signed with secret. It is meant for development setups (the
// "sshapi token" command).
func IssueHS256(secret []byte, user string, ttl time.Duration, now time.Time) (string, error) {
	if len(secret) < MinHS256SecretSize {
		return "", fmt.Errorf("auth: HS256 secret is %d bytes, want at least %d", len(secret), MinHS256SecretSize)
	}
	if user == "" {
		return "", errors.New("auth: empty user")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("auth: token lifetime %v must be positive", ttl)
	}
	claims := jwt.RegisteredClaims{
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("auth: sign token: %w", err)
	}
	return s, nil
}
