package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxJWKSSize bounds a fetched key set document.
const maxJWKSSize = 1 << 20

// minRSABits is the smallest RSA modulus accepted from a key set.
const minRSABits = 2048

// jwks is a JSON Web Key Set fetched from a URL, refreshed in the background
// and on demand when a token names an unknown key id (rate limited).
//
// Fetches run on the key set's own context with their own timeout, one at a
// time (later callers join the fetch in flight): a caller that gives up stops
// waiting but neither cancels nor holds up the fetch, and cannot make it fail
// for everyone else.
//
// The key set is parsed here with the standard library rather than with
// github.com/MicahParks/keyfunc/v3: that library's dependency
// github.com/MicahParks/jwkset is not available from the module proxy used
// by this project. Only what RS256 and ES256 need is implemented.
type jwks struct {
	url        string
	client     *http.Client
	refresh    time.Duration
	minRefresh time.Duration
	timeout    time.Duration
	log        *slog.Logger

	mu        sync.Mutex // guards the fields below
	keys      []jwk
	lastStart time.Time // when the last fetch started
	lastErr   error
	inflight  *flight // the fetch running now, if any
	closed    bool

	base   context.Context // parent of every fetch; cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the refresh loop and fetches in flight
}

// flight is one fetch of the key set; done is closed when err is set.
type flight struct {
	done chan struct{}
	err  error
}

// jwk is one usable verification key from the set.
type jwk struct {
	kid string
	alg string // "" if the set does not restrict it
	key any    // *rsa.PublicKey or *ecdsa.PublicKey
}

// startJWKS fetches the key set once with ctx and starts the refresh
// goroutine, which runs until close.
func startJWKS(ctx context.Context, cfg Config) (*jwks, error) {
	j := &jwks{
		url:        cfg.JWKSURL,
		client:     cfg.HTTPClient,
		refresh:    cfg.JWKSRefresh,
		minRefresh: cfg.JWKSMinRefresh,
		timeout:    cfg.JWKSFetchTimeout,
		log:        cfg.Log,
	}
	if j.client == nil {
		j.client = http.DefaultClient
	}
	if j.refresh <= 0 {
		j.refresh = time.Hour
	}
	if j.minRefresh <= 0 {
		j.minRefresh = time.Minute
	}
	if j.timeout <= 0 {
		j.timeout = 10 * time.Second
	}
	if j.log == nil {
		j.log = slog.New(slog.DiscardHandler)
	}
	fctx, cancel := context.WithTimeout(ctx, j.timeout)
	keys, err := j.download(fctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	j.keys, j.lastStart = keys, time.Now()
	j.base, j.cancel = context.WithCancel(context.Background())
	j.wg.Add(1)
	go j.run()
	return j, nil
}

// run refreshes the key set every j.refresh, or every j.minRefresh after a
// failed fetch, until close. A failed refresh keeps the old keys.
func (j *jwks) run() {
	defer j.wg.Done()
	wait := j.refresh
	for {
		timer := time.NewTimer(wait)
		select {
		case <-j.base.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		j.mu.Lock()
		f := j.startLocked()
		j.mu.Unlock()
		select {
		case <-j.base.Done():
			return
		case <-f.done:
		}
		wait = j.refresh
		if f.err != nil {
			wait = j.minRefresh
		}
	}
}

// close stops the refresh goroutine and any fetch in flight and waits for
// them to end.
func (j *jwks) close() {
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	j.cancel()
	j.wg.Wait()
}

// startLocked returns the fetch in flight, starting one if there is none;
// j.mu must be held.
func (j *jwks) startLocked() *flight {
	if j.inflight != nil {
		return j.inflight
	}
	f := &flight{done: make(chan struct{})}
	if j.closed {
		f.err = errors.New("key set closed")
		close(f.done)
		return f
	}
	j.inflight, j.lastStart = f, time.Now()
	j.wg.Add(1)
	go j.fetch(f)
	return f
}

// fetch downloads the key set on the key set's own context, installs it and
// completes f.
func (j *jwks) fetch(f *flight) {
	defer j.wg.Done()
	ctx, cancel := context.WithTimeout(j.base, j.timeout)
	keys, err := j.download(ctx)
	cancel()
	if err != nil {
		j.log.Warn("JWKS refresh failed; keeping the previous keys", "err", err)
	}
	j.mu.Lock()
	if err == nil {
		j.keys = keys
	}
	j.lastErr, j.inflight, f.err = err, nil, err
	j.mu.Unlock()
	close(f.done)
}

// lookup returns the key for kid usable with alg. If no key matches, it
// waits (as long as ctx allows) for a fresh copy of the set: the fetch in
// flight, or a new one if the last started at least j.minRefresh ago.
func (j *jwks) lookup(ctx context.Context, kid, alg string) (any, error) {
	k, err := j.find(kid, alg)
	if err == nil {
		return k, nil
	}
	j.mu.Lock()
	f := j.inflight
	if f == nil && time.Since(j.lastStart) >= j.minRefresh {
		f = j.startLocked()
	}
	lastErr := j.lastErr
	j.mu.Unlock()
	if f == nil {
		if lastErr != nil {
			return nil, fmt.Errorf("%w (last key set refresh failed: %w)", err, lastErr)
		}
		return nil, fmt.Errorf("%w (key set fetched less than %v ago)", err, j.minRefresh)
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w (stopped waiting for the key set refresh: %w)", err, ctx.Err())
	}
	if f.err != nil {
		return nil, fmt.Errorf("%w (key set refresh failed: %w)", err, f.err)
	}
	return j.find(kid, alg)
}

// find looks kid up in the current keys. A token without kid matches only
// if exactly one key fits alg.
func (j *jwks) find(kid, alg string) (any, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var found []any
	for _, k := range j.keys {
		if (kid == "" || k.kid == kid) && k.fits(alg) {
			found = append(found, k.key)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1 && kid == "":
		return nil, fmt.Errorf("token has no kid and %d %s keys match", len(found), alg)
	case len(found) > 1:
		return nil, fmt.Errorf("key id %q is not unique in the key set", kid)
	default:
		return nil, fmt.Errorf("no %s key with id %q in the key set", alg, kid)
	}
}

// fits reports whether k may verify tokens signed with alg.
func (k jwk) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch k.key.(type) {
	case *rsa.PublicKey:
		return alg == "RS256"
	case *ecdsa.PublicKey:
		return alg == "ES256"
	}
	return false
}

func (j *jwks) download(ctx context.Context) ([]jwk, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return nil, fmt.Errorf("JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS %s: HTTP status %s", req.URL.Redacted(), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	if len(body) > maxJWKSSize {
		return nil, fmt.Errorf("JWKS from %s is larger than %d bytes", req.URL.Redacted(), maxJWKSSize)
	}
	return parseJWKS(body)
}

// rawJWK holds the JWK members this package reads (RFC 7517, 7518).
type rawJWK struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS returns the RS256 and ES256 signature keys of a JWK Set. Keys for
// other uses or algorithms are skipped; a set with no usable key is an error.
func parseJWKS(body []byte) ([]jwk, error) {
	var set struct {
		Keys []rawJWK `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("parse JWKS: %w", err)
	}
	var (
		keys    []jwk
		skipped []string
	)
	for i, r := range set.Keys {
		if r.Use != "" && r.Use != "sig" {
			continue
		}
		if r.Alg != "" && r.Alg != "RS256" && r.Alg != "ES256" {
			continue
		}
		key, err := r.publicKey()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d (kid %q): %v", i, r.Kid, err))
			continue
		}
		keys = append(keys, jwk{kid: r.Kid, alg: r.Alg, key: key})
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("JWKS has no usable RS256 or ES256 signing key; %s", strings.Join(skipped, "; "))
	}
	return keys, nil
}

func (r rawJWK) publicKey() (any, error) {
	switch r.Kty {
	case "RSA":
		n, err := b64url(r.N)
		if err != nil {
			return nil, fmt.Errorf("n: %w", err)
		}
		e, err := b64url(r.E)
		if err != nil {
			return nil, fmt.Errorf("e: %w", err)
		}
		if len(e) == 0 || len(e) > 4 {
			return nil, errors.New("unsupported RSA exponent size")
		}
		exp := int(new(big.Int).SetBytes(e).Int64())
		if exp < 3 || exp%2 == 0 {
			return nil, errors.New("invalid RSA exponent")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}
		if pub.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("RSA key of %d bits is too small", pub.N.BitLen())
		}
		return pub, nil
	case "EC":
		if r.Crv != "P-256" {
			return nil, fmt.Errorf("unsupported curve %q", r.Crv)
		}
		x, err := b64url(r.X)
		if err != nil {
			return nil, fmt.Errorf("x: %w", err)
		}
		y, err := b64url(r.Y)
		if err != nil {
			return nil, fmt.Errorf("y: %w", err)
		}
		if len(x) != 32 || len(y) != 32 {
			return nil, errors.New("P-256 coordinates must be 32 bytes")
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, fmt.Errorf("EC point: %w", err)
		}
		return pub, nil
	default:
		return nil, fmt.Errorf("unsupported key type %q", r.Kty)
	}
}

// b64url decodes base64url with or without padding.
func b64url(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}
