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
// The key set is parsed here with the standard library rather than with
// github.com/MicahParks/keyfunc/v3: that library's dependency
// github.com/MicahParks/jwkset is not available from the module proxy used
// by this project. Only what RS256 and ES256 need is implemented.
type jwks struct {
	url        string
	client     *http.Client
	refresh    time.Duration
	minRefresh time.Duration

	fetchMu sync.Mutex // serializes fetches

	mu        sync.Mutex // guards the fields below
	keys      []jwk
	lastFetch time.Time
	lastErr   error

	cancel context.CancelFunc
	done   chan struct{}
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
		done:       make(chan struct{}),
	}
	if j.client == nil {
		j.client = &http.Client{Timeout: 10 * time.Second}
	}
	if j.refresh <= 0 {
		j.refresh = time.Hour
	}
	if j.minRefresh <= 0 {
		j.minRefresh = time.Minute
	}
	if err := j.fetch(ctx); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	j.cancel = cancel
	go j.run(bg)
	return j, nil
}

// run refreshes the key set every j.refresh, or every j.minRefresh after a
// failed fetch, until ctx is cancelled. A failed refresh keeps the old keys.
func (j *jwks) run(ctx context.Context) {
	defer close(j.done)
	wait := j.refresh
	for {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		wait = j.refresh
		if err := j.fetch(ctx); err != nil {
			wait = j.minRefresh
		}
	}
}

// close stops the refresh goroutine and waits for it to end.
func (j *jwks) close() {
	j.cancel()
	<-j.done
}

// lookup returns the key for kid usable with alg, fetching the set again if
// no key matches and the last fetch is older than j.minRefresh.
func (j *jwks) lookup(ctx context.Context, kid, alg string) (any, error) {
	k, err := j.find(kid, alg)
	if err == nil {
		return k, nil
	}
	j.fetchMu.Lock()
	defer j.fetchMu.Unlock()
	// Another caller may have fetched while this one waited.
	if k, err := j.find(kid, alg); err == nil {
		return k, nil
	}
	j.mu.Lock()
	recent := time.Since(j.lastFetch) < j.minRefresh
	j.mu.Unlock()
	if !recent {
		if ferr := j.fetchLocked(ctx); ferr != nil {
			return nil, fmt.Errorf("%w (key set refresh failed: %w)", err, ferr)
		}
		return j.find(kid, alg)
	}
	j.mu.Lock()
	lastErr := j.lastErr
	j.mu.Unlock()
	if lastErr != nil {
		return nil, fmt.Errorf("%w (last key set refresh failed: %w)", err, lastErr)
	}
	return nil, err
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

func (j *jwks) fetch(ctx context.Context) error {
	j.fetchMu.Lock()
	defer j.fetchMu.Unlock()
	return j.fetchLocked(ctx)
}

// fetchLocked downloads and installs the key set; j.fetchMu must be held.
func (j *jwks) fetchLocked(ctx context.Context) error {
	keys, err := j.download(ctx)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lastFetch, j.lastErr = time.Now(), err
	if err != nil {
		return err
	}
	j.keys = keys
	return nil
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
		return nil, fmt.Errorf("fetch JWKS %s: HTTP status %s", j.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	if len(body) > maxJWKSSize {
		return nil, fmt.Errorf("JWKS from %s is larger than %d bytes", j.url, maxJWKSSize)
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
