package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// idp is a fake OpenID provider serving a JWKS that tests can change.
type idp struct {
	srv     *httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	keys    []map[string]string
	status  int
}

func newIDP(t *testing.T, keys ...map[string]string) *idp {
	t.Helper()
	p := &idp{keys: keys, status: http.StatusOK}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.status != http.StatusOK {
			w.WriteHeader(p.status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": p.keys})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) set(keys ...map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = keys
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PrivateKey) map[string]string {
	return map[string]string{
		"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes()),
	}
}

func ecJWK(kid string, k *ecdsa.PrivateKey) map[string]string {
	pub, err := k.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		panic(err)
	}
	return map[string]string{
		"kty": "EC", "kid": kid, "crv": "P-256",
		"x": b64(pub[1:33]), "y": b64(pub[33:]),
	}
}

func TestJWKS(t *testing.T) {
	rsa1, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa2, _ := rsa.GenerateKey(rand.Reader, 2048)
	rogue, _ := rsa.GenerateKey(rand.Reader, 2048)
	ec1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&rsa1.PublicKey))})

	provider := newIDP(t,
		rsaJWK("r1", rsa1), ecJWK("e1", ec1),
		rsaJWK("weak", small),
		map[string]string{"kty": "RSA", "kid": "enc", "use": "enc", "n": b64(rsa2.N.Bytes()), "e": "AQAB"},
		map[string]string{"kty": "OKP", "kid": "ed", "crv": "Ed25519", "x": "AAAA"},
	)
	v, err := New(t.Context(), Config{
		HS256Secret: testSecret,
		JWKSURL:     provider.srv.URL,
		Issuer:      "https://idp.example",
		Audience:    "sshapi",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	exp := time.Now().Add(time.Hour).Unix()
	claims := func(sub string) jwt.MapClaims {
		return jwt.MapClaims{"sub": sub, "exp": exp, "iss": "https://idp.example", "aud": "sshapi"}
	}
	tests := []struct {
		name    string
		token   string
		want    string
		wantErr string
	}{
		{name: "RS256", token: sign(t, jwt.SigningMethodRS256, rsa1, claims("alice"), map[string]any{"kid": "r1"}), want: "alice"},
		{name: "ES256", token: sign(t, jwt.SigningMethodES256, ec1, claims("bob"), map[string]any{"kid": "e1"}), want: "bob"},
		{name: "HS256 alongside", token: sign(t, jwt.SigningMethodHS256, testSecret, claims("carol"), nil), want: "carol"},
		{name: "RS256 signed by another key", token: sign(t, jwt.SigningMethodRS256, rogue, claims("alice"), map[string]any{"kid": "r1"}), wantErr: "signature is invalid"},
		{name: "RS256 naming the EC key", token: sign(t, jwt.SigningMethodRS256, rsa1, claims("alice"), map[string]any{"kid": "e1"}), wantErr: `no RS256 key with id "e1"`},
		{name: "encryption key not used", token: sign(t, jwt.SigningMethodRS256, rsa2, claims("alice"), map[string]any{"kid": "enc"}), wantErr: `no RS256 key with id "enc"`},
		{name: "weak RSA key not used", token: sign(t, jwt.SigningMethodRS256, small, claims("alice"), map[string]any{"kid": "weak"}), wantErr: `no RS256 key with id "weak"`},
		{name: "no kid, one RS256 key in the set", token: sign(t, jwt.SigningMethodRS256, rsa1, claims("dave"), nil), want: "dave"},
		{
			// The classic confusion: HS256 keyed with the public key.
			name:    "HS256 signed with the RSA public key",
			token:   sign(t, jwt.SigningMethodHS256, pubPEM, claims("mallory"), map[string]any{"kid": "r1"}),
			wantErr: "signature is invalid",
		},
		{name: "wrong issuer", token: sign(t, jwt.SigningMethodRS256, rsa1, jwt.MapClaims{"sub": "a", "exp": exp, "iss": "x", "aud": "sshapi"}, map[string]any{"kid": "r1"}), wantErr: "wrong issuer"},
		{name: "no exp", token: sign(t, jwt.SigningMethodRS256, rsa1, jwt.MapClaims{"sub": "a", "iss": "https://idp.example", "aud": "sshapi"}, map[string]any{"kid": "r1"}), wantErr: "exp claim is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := v.Verify(t.Context(), tt.token)
			if tt.wantErr == "" {
				if err != nil || p.User != tt.want {
					t.Fatalf("Verify = %+v, %v; want %q", p, err, tt.want)
				}
				return
			}
			checkRefusal(t, err, tt.wantErr)
		})
	}
}

func TestJWKSOnlyRejectsHS256(t *testing.T) {
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	provider := newIDP(t, rsaJWK("r1", k))
	v, err := New(t.Context(), Config{JWKSURL: provider.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	tok := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(time.Hour).Unix()}, nil)
	_, err = v.Verify(t.Context(), tok)
	checkRefusal(t, err, "HS256 is invalid")
}

func TestJWKSKeyRotation(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	provider := newIDP(t, rsaJWK("k1", k1))
	tests := []struct {
		name        string
		minRefresh  time.Duration
		wantOK      bool
		wantFetches int64 // after the initial fetch and two verifications
	}{
		{"unknown kid refetches", time.Millisecond, true, 2},
		{"refetch is rate limited", time.Hour, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			provider.set(rsaJWK("k1", k1))
			provider.fetches.Store(0)
			v, err := New(t.Context(), Config{JWKSURL: provider.srv.URL, JWKSMinRefresh: tt.minRefresh})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			// The provider rotates to k2 after the verifier fetched the set.
			provider.set(rsaJWK("k1", k1), rsaJWK("k2", k2))
			tok := sign(t, jwt.SigningMethodRS256, k2, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(time.Hour).Unix()}, map[string]any{"kid": "k2"})
			time.Sleep(2 * time.Millisecond) // older than the short minRefresh
			for range 2 {
				_, err = v.Verify(t.Context(), tok)
			}
			if (err == nil) != tt.wantOK {
				t.Fatalf("Verify with rotated key = %v, want ok=%v", err, tt.wantOK)
			}
			if got := provider.fetches.Load(); got != tt.wantFetches {
				t.Fatalf("JWKS fetched %d times, want %d", got, tt.wantFetches)
			}
		})
	}
}

func TestJWKSBackgroundRefreshStopsOnClose(t *testing.T) {
	k, _ := rsa.GenerateKey(rand.Reader, 2048)
	provider := newIDP(t, rsaJWK("k1", k))
	v, err := New(t.Context(), Config{JWKSURL: provider.srv.URL, JWKSRefresh: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for provider.fetches.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := provider.fetches.Load(); n < 3 {
		t.Fatalf("only %d fetches; background refresh is not running", n)
	}
	// A failing refresh keeps the keys already known.
	provider.mu.Lock()
	provider.status = http.StatusInternalServerError
	provider.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	tok := sign(t, jwt.SigningMethodRS256, k, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(time.Hour).Unix()}, map[string]any{"kid": "k1"})
	if _, err := v.Verify(t.Context(), tok); err != nil {
		t.Fatalf("Verify after failed refresh: %v", err)
	}

	v.Close()
	after := provider.fetches.Load()
	time.Sleep(60 * time.Millisecond)
	if n := provider.fetches.Load(); n != after {
		t.Fatalf("JWKS fetched %d more times after Close", n-after)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestJWKSRefreshBelongsToTheVerifier: a token with an unknown key id starts one refresh, which
// runs on the verifier's own context. Callers that give up (cancelled, or with a short deadline)
// stop waiting at once but neither abort the fetch nor make it fail for others; callers arriving
// meanwhile join the same fetch.
func TestJWKSRefreshBelongsToTheVerifier(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := rsa.GenerateKey(rand.Reader, 2048)
	var (
		fetches, aborted atomic.Int64
		arrived          = make(chan struct{}, 1)
		release          = make(chan struct{})
		keys             atomic.Value
	)
	keys.Store([]map[string]string{rsaJWK("k1", k1)})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fetches.Add(1) > 1 { // every refresh after the first fetch waits for the test
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				aborted.Add(1)
				return
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": keys.Load()})
	}))
	defer srv.Close()
	v, err := New(t.Context(), Config{JWKSURL: srv.URL, JWKSMinRefresh: time.Nanosecond, JWKSFetchTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	keys.Store([]map[string]string{rsaJWK("k1", k1), rsaJWK("k2", k2)}) // the provider rotates
	tok := sign(t, jwt.SigningMethodRS256, k2, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(time.Hour).Unix()}, map[string]any{"kid": "k2"})

	// A caller that cancels while the refresh it started is in flight.
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { _, err := v.Verify(ctx, tok); first <- err }()
	<-arrived
	cancel()
	checkRefusal(t, <-first, "stopped waiting for the key set refresh")

	// A caller with a short deadline returns at its deadline, not when the fetch ends.
	short, cancelShort := context.WithTimeout(t.Context(), 20*time.Millisecond)
	_, err = v.Verify(short, tok)
	cancelShort()
	checkRefusal(t, err, "stopped waiting")

	// Patient callers all join the one fetch in flight.
	const patient = 8
	results := make(chan error, patient)
	for range patient {
		go func() { _, err := v.Verify(t.Context(), tok); results <- err }()
	}
	close(release)
	for range patient {
		if err := <-results; err != nil {
			t.Errorf("Verify after the refresh: %v", err)
		}
	}
	if n, a := fetches.Load(), aborted.Load(); n != 2 || a != 0 {
		t.Fatalf("%d fetches, %d aborted; want the initial one and one refresh, none aborted", n, a)
	}
}
