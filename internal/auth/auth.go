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
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrUnauthenticated is wrapped by every error from Verify (an *Error).
var ErrUnauthenticated = errors.New("unauthenticated")

// Error is a refused token. Its message is what the caller may be told: that
// the token is missing, malformed, expired or not valid yet, or else just
// "invalid token", never which check failed (signature, algorithm, issuer,
// audience, key id, key set refresh), because that would describe the
// verifier's configuration. Reason has the specifics for debug logs; neither
// contains the token.
type Error struct {
	// Public is the short explanation safe for a response body.
	Public string
	// Reason is the detailed explanation for logs.
	Reason string
}

// Error implements error with the public explanation only.
func (e *Error) Error() string { return ErrUnauthenticated.Error() + ": " + e.Public }

// Unwrap makes errors.Is(err, ErrUnauthenticated) hold.
func (e *Error) Unwrap() error { return ErrUnauthenticated }

// invalidToken is the public explanation of every refusal that would reveal
// configuration.
const invalidToken = "invalid token"

// Leeway is the clock skew tolerated when checking exp, nbf and iat.
const Leeway = 30 * time.Second

// MinHS256SecretSize is the shortest accepted HS256 secret, in bytes.
const MinHS256SecretSize = 32

// maxSubjectLen bounds the sub claim, which becomes the owner key in the
// store.
const maxSubjectLen = 256

// maxKidLen bounds the key id looked up (and logged).
const maxKidLen = 256

// SubjectProblem says why sub cannot name a user, "" when it can: it is empty, longer than 256
// bytes, holds control characters or starts with LinkPrincipalPrefix. Every way in (bearer
// tokens, the web UI's ID tokens) asks it, so a user is the same principal whichever way they
// come.
func SubjectProblem(sub string) string {
	switch {
	case sub == "":
		return "token has no sub claim"
	case len(sub) > maxSubjectLen:
		return fmt.Sprintf("sub claim longer than %d bytes", maxSubjectLen)
	case strings.ContainsFunc(sub, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "sub claim contains control characters"
	case strings.HasPrefix(sub, LinkPrincipalPrefix):
		return "sub claim starts with " + LinkPrincipalPrefix + ", which names share links"
	}
	return ""
}

// LinkPrincipalPrefix starts the principal of a request made with a share link ("link:ID"), as
// the audit and the guard name it. No token's subject may start with it: a user of that name
// would read, as their own, the audit entries of that link.
const LinkPrincipalPrefix = "link:"

// Principal is the authenticated caller.
type Principal struct {
	// User is the token's subject (sub claim).
	User string
	// Groups are the values of the groups claim (Config.GroupsClaim), for group grants.
	Groups []string
	// Operator is set for the users and group members the configuration names operators.
	Operator bool
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
	// JWKSFetchTimeout bounds one fetch of the key set; 0 means 10 s.
	JWKSFetchTimeout time.Duration
	// HTTPClient fetches the key set; nil means http.DefaultClient (each
	// fetch is bounded by JWKSFetchTimeout).
	HTTPClient *http.Client
	// Log receives why tokens are refused (debug) and key set refresh
	// failures (warn); nil discards.
	Log *slog.Logger
	// GroupsClaim names the claim listing the caller's groups (a string or
	// a list of strings); "" means "groups".
	GroupsClaim string
	// Operators are users (sub) who are operators; OperatorGroup, if set,
	// makes every member of that group an operator too.
	Operators     []string
	OperatorGroup string
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
	log     *slog.Logger
	groups  string
	ops     []string
	opGroup string
	secret  []byte
	jwks    *jwks // nil without JWKSURL
	parser  *jwt.Parser
	methods []string

	// hs holds the HS256 tokens this Verifier accepted (see verifiedHS256), keyed by the whole
	// token; hsN counts them, to bound the memory they take.
	hs  sync.Map
	hsN atomic.Int64
}

// maxVerifiedHS256 bounds the accepted HS256 tokens a Verifier keeps; when more are accepted,
// it starts over.
const maxVerifiedHS256 = 4096

// maxKeptTokenBytes is the longest token a Verifier keeps: with maxVerifiedHS256 it bounds their
// memory to 16 MiB whatever the server's header cap (64 KiB by default) lets a token grow to; a
// longer token is verified from scratch at every use.
const maxKeptTokenBytes = 4 << 10

// verifiedHS256 is an HS256 token the Verifier accepted: the Principal it names and the times
// between which its time claims hold ([from, until)).
//
// What an HS256 token says depends on nothing but its bytes, the Verifier's secret (fixed for
// the Verifier's life) and the time: the signature, algorithm, issuer, audience and subject
// checks give the same answer for the same token every time, and the one thing that changes,
// whether now lies within exp, nbf and iat (with Leeway), is checked again at every use
// against the window kept here, exactly as the parser checks it. A token that leaves its window
// is verified from scratch (and refused with the parser's reason). So keeping accepted tokens
// changes no answer; it saves the JSON decoding of the token's header and claims (about 25 µs
// of a 10-entry listing's request, in the clients bench's profile). There is no revocation of
// an HS256 token short of changing the secret (a new Verifier). Tokens of a key set (RS256,
// ES256) are never kept: a key dropped from the set must refuse its tokens at the next request.
type verifiedHS256 struct {
	p           Principal
	from, until time.Time
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
	v := &Verifier{jwks: keys, log: cfg.Log, groups: cfg.GroupsClaim, ops: cfg.Operators, opGroup: cfg.OperatorGroup}
	if v.groups == "" {
		v.groups = "groups"
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
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
// Principal. Errors are *Error (wrapping ErrUnauthenticated); the reason is
// also logged at debug level.
func (v *Verifier) Verify(ctx context.Context, token string) (Principal, error) {
	p, err := v.verify(ctx, token)
	if err != nil {
		v.log.Debug("token refused", "reason", err.Reason)
		return Principal{}, err
	}
	return p, nil
}

func (v *Verifier) verify(ctx context.Context, token string) (Principal, *Error) {
	if token == "" {
		return Principal{}, &Error{Public: "no token", Reason: "no token"}
	}
	if v.secret != nil {
		if e, ok := v.hs.Load(token); ok {
			k := e.(*verifiedHS256)
			if now := time.Now(); !now.Before(k.from) && now.Before(k.until) {
				return k.p, nil
			}
		}
	}
	claims := jwt.MapClaims{}
	t, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		return v.key(ctx, t)
	})
	if err != nil {
		return Principal{}, refusal(err)
	}
	sub, serr := claims.GetSubject()
	var why string
	switch {
	case serr != nil:
		why = "sub claim is not a string"
	case SubjectProblem(sub) != "":
		why = SubjectProblem(sub)
	default:
		p := Principal{User: sub, Groups: groupsOf(claims[v.groups])}
		p.Operator = slices.Contains(v.ops, sub) || (v.opGroup != "" && slices.Contains(p.Groups, v.opGroup))
		if t.Method.Alg() == jwt.SigningMethodHS256.Alg() && len(token) <= maxKeptTokenBytes {
			v.keepHS256(token, p, claims)
		}
		return p, nil
	}
	return Principal{}, &Error{Public: why, Reason: why} // about the token only
}

// keepHS256 keeps token, just accepted, with p and the window its time claims allow (see
// verifiedHS256): now is before exp+Leeway, and not before iat-Leeway nor nbf-Leeway, as the
// parser checks them.
func (v *Verifier) keepHS256(token string, p Principal, claims jwt.MapClaims) {
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil { // required, so not seen here; never keep without it
		return
	}
	p.Groups = slices.Clip(p.Groups) // shared by every request that shows token: read only
	k := &verifiedHS256{p: p, until: exp.Add(Leeway)}
	for _, get := range []func() (*jwt.NumericDate, error){claims.GetIssuedAt, claims.GetNotBefore} {
		t, err := get()
		if err != nil {
			return
		}
		if t != nil && t.Add(-Leeway).After(k.from) {
			k.from = t.Add(-Leeway)
		}
	}
	if v.hsN.Add(1) > maxVerifiedHS256 {
		v.hs.Clear()
		v.hsN.Store(1)
	}
	v.hs.Store(token, k)
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
		if len(kid) > maxKidLen {
			return nil, fmt.Errorf("kid longer than %d bytes", maxKidLen)
		}
		// lookup returns only keys whose type fits the algorithm.
		return v.jwks.lookup(ctx, kid, t.Method.Alg())
	default:
		return nil, fmt.Errorf("algorithm %q is not accepted", t.Method.Alg())
	}
}

// refusal turns a jwt error into an *Error without token contents.
func refusal(err error) *Error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return &Error{Public: "malformed token", Reason: "malformed token"}
	case errors.Is(err, jwt.ErrTokenExpired):
		return &Error{Public: "token expired", Reason: "token expired"}
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return &Error{Public: "token not valid yet", Reason: "token not valid yet"}
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return &Error{Public: "token not valid yet", Reason: "token issued in the future"}
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return &Error{Public: invalidToken, Reason: "wrong issuer"}
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return &Error{Public: invalidToken, Reason: "wrong audience"}
	default:
		// Missing claims ("exp claim is required"), signature errors (a bad
		// signature or an algorithm not accepted) and key lookup errors name
		// at most a claim, the algorithm and the key id, never token
		// contents.
		return &Error{Public: invalidToken, Reason: err.Error()}
	}
}

// maxGroups bounds the groups taken from one token; maxGroupLen one group's name.
const (
	maxGroups   = 256
	maxGroupLen = 256
)

// groupsOf reads a groups claim: a string or a list of strings; other values and overlong
// names are ignored.
func groupsOf(v any) []string {
	var out []string
	add := func(x any) {
		if g, ok := x.(string); ok && g != "" && len(g) <= maxGroupLen && len(out) < maxGroups {
			out = append(out, g)
		}
	}
	switch t := v.(type) {
	case string:
		add(t)
	case []any:
		for _, x := range t {
			add(x)
		}
	}
	return out
}

// IssueHS256Groups is IssueHS256 with the caller's groups in the named claim (the service's
// auth.groups_claim; "groups" when empty), for development tokens that exercise group grants.
func IssueHS256Groups(secret []byte, user, claim string, groups []string, ttl time.Duration, now time.Time) (string, error) {
	if len(groups) == 0 {
		return IssueHS256(secret, user, ttl, now)
	}
	if len(secret) < MinHS256SecretSize || user == "" || ttl <= 0 {
		return IssueHS256(secret, user, ttl, now) // the same validation errors
	}
	if claim == "" {
		claim = "groups"
	}
	if claim == "sub" || claim == "iat" || claim == "exp" {
		return "", fmt.Errorf("auth: groups claim %q would replace a registered claim", claim)
	}
	claims := jwt.MapClaims{"sub": user, "iat": now.Unix(), "exp": now.Add(ttl).Unix(), claim: groups}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("auth: sign token: %w", err)
	}
	return s, nil
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
