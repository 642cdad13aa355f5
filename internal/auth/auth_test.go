package auth

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyHS256(t *testing.T) {
	now := time.Now()
	exp := now.Add(time.Hour).Unix()
	hs := func(claims jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, testSecret, claims, nil) }
	issued, err := IssueHS256(testSecret, "alice", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		token   string
		opts    []Option
		want    string // user on success
		wantErr string // substring of the error otherwise
	}{
		{name: "issued token", token: issued, want: "alice"},
		{name: "minimal claims", token: hs(jwt.MapClaims{"sub": "bob", "exp": exp}), want: "bob"},
		{name: "expired within leeway", token: hs(jwt.MapClaims{"sub": "bob", "exp": now.Add(-10 * time.Second).Unix()}), want: "bob"},
		{name: "missing exp", token: hs(jwt.MapClaims{"sub": "bob"}), wantErr: "exp claim is required"},
		{name: "expired", token: hs(jwt.MapClaims{"sub": "bob", "exp": now.Add(-time.Minute).Unix()}), wantErr: "expired"},
		{name: "not yet valid", token: hs(jwt.MapClaims{"sub": "bob", "exp": exp, "nbf": now.Add(time.Minute).Unix()}), wantErr: "not valid yet"},
		{name: "issued in the future", token: hs(jwt.MapClaims{"sub": "bob", "exp": exp, "iat": now.Add(time.Minute).Unix()}), wantErr: "future"},
		{name: "empty sub", token: hs(jwt.MapClaims{"sub": "", "exp": exp}), wantErr: "no sub"},
		{name: "sub of a link", token: hs(jwt.MapClaims{"sub": "link:l_abc", "exp": exp}), wantErr: "names share links"},
		{name: "sub with a colon", token: hs(jwt.MapClaims{"sub": "http://cilogon.org/serverE/users/1", "exp": exp}), want: "http://cilogon.org/serverE/users/1"},
		{name: "missing sub", token: hs(jwt.MapClaims{"exp": exp}), wantErr: "no sub"},
		{name: "control character in sub", token: hs(jwt.MapClaims{"sub": "a\nb", "exp": exp}), wantErr: "control"},
		{name: "overlong sub", token: hs(jwt.MapClaims{"sub": strings.Repeat("x", 300), "exp": exp}), wantErr: "longer"},
		{
			name:    "wrong secret",
			token:   sign(t, jwt.SigningMethodHS256, []byte("another secret of thirty-two b!!"), jwt.MapClaims{"sub": "bob", "exp": exp}, nil),
			wantErr: "signature is invalid",
		},
		{
			name:    "alg none",
			token:   sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "bob", "exp": exp}, nil),
			wantErr: "signing method none is invalid",
		},
		{
			name:    "HS512 with the right secret",
			token:   sign(t, jwt.SigningMethodHS512, testSecret, jwt.MapClaims{"sub": "bob", "exp": exp}, nil),
			wantErr: "signing method HS512 is invalid",
		},
		{
			// Header says RS256, signature is an HMAC with the shared secret:
			// must not be verified with the secret.
			name:    "RS256 header with HMAC signature",
			token:   rs256HeaderHMACBody(t, jwt.MapClaims{"sub": "bob", "exp": exp}),
			wantErr: "signing method RS256 is invalid",
		},
		{name: "malformed", token: "not.a.jwt", wantErr: "malformed"},
		{name: "empty", token: "", wantErr: "no token"},
		{name: "issuer required, absent", token: issued, opts: []Option{WithIssuer("https://idp")}, wantErr: "iss claim is required"},
		{name: "issuer matches", token: hs(jwt.MapClaims{"sub": "bob", "exp": exp, "iss": "https://idp"}), opts: []Option{WithIssuer("https://idp")}, want: "bob"},
		{name: "audience wrong", token: hs(jwt.MapClaims{"sub": "bob", "exp": exp, "aud": "other"}), opts: []Option{WithAudience("sshapi")}, wantErr: "wrong audience"},
		{name: "audience in list", token: hs(jwt.MapClaims{"sub": "bob", "exp": exp, "aud": []string{"x", "sshapi"}}), opts: []Option{WithAudience("sshapi")}, want: "bob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewHS256Verifier(testSecret, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			p, err := v.Verify(t.Context(), tt.token)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if p.User != tt.want {
					t.Fatalf("User = %q, want %q", p.User, tt.want)
				}
				return
			}
			checkRefusal(t, err, tt.wantErr)
			if p.User != "" || p.Groups != nil || p.Operator {
				t.Fatalf("Verify returned principal %+v with an error", p)
			}
			if parts := strings.Split(tt.token, "."); len(parts) == 3 && len(parts[1]) > 8 && strings.Contains(err.(*Error).Reason, parts[1]) {
				t.Fatal("error message echoes the token")
			}
		})
	}
}

// publicReasons are the only explanations a refused caller may get.
var publicReasons = map[string]bool{
	"no token": true, "malformed token": true, "token expired": true, "token not valid yet": true, invalidToken: true,
	"token has no sub claim": true, "sub claim contains control characters": true, "sub claim longer than 256 bytes": true,
	"sub claim starts with link:, which names share links": true,
}

// checkRefusal asserts err is an *Error wrapping ErrUnauthenticated whose Reason says
// wantReason and whose message is one of the generic public ones, so that a response built from
// err.Error() says nothing about which check failed or how the verifier is configured.
func checkRefusal(t *testing.T, err error, wantReason string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(e.Reason, wantReason) {
		t.Fatalf("Verify error = %#v, want an *Error with a reason saying %q", err, wantReason)
	}
	if !publicReasons[e.Public] || err.Error() != "unauthenticated: "+e.Public {
		t.Fatalf("public message %q (error %q) is not one of the generic ones", e.Public, err.Error())
	}
}

// rs256HeaderHMACBody returns a token whose header claims RS256 but whose
// signature is HMAC-SHA256 with testSecret.
func rs256HeaderHMACBody(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	signing, err := tok.SigningString()
	if err != nil {
		t.Fatal(err)
	}
	sig, err := jwt.SigningMethodHS256.Sign(signing, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + tok.EncodeSegment(sig)
}

func TestIssueHS256(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		secret  []byte
		user    string
		ttl     time.Duration
		wantErr bool
	}{
		{"ok", testSecret, "alice", time.Hour, false},
		{"short secret", testSecret[:16], "alice", time.Hour, true},
		{"empty user", testSecret, "", time.Hour, true},
		{"zero ttl", testSecret, "alice", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := IssueHS256(tt.secret, tt.user, tt.ttl, now)
			if tt.wantErr {
				if err == nil {
					t.Fatal("IssueHS256 succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			claims := jwt.RegisteredClaims{}
			_, err = jwt.NewParser(jwt.WithTimeFunc(func() time.Time { return now })).
				ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return testSecret, nil })
			if err != nil {
				t.Fatal(err)
			}
			if claims.Subject != tt.user || !claims.ExpiresAt.Equal(now.Add(tt.ttl)) || !claims.IssuedAt.Equal(now) {
				t.Fatalf("claims = %+v", claims)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"nothing configured", Config{}, "no token source"},
		{"short secret", Config{HS256Secret: []byte("short")}, "at least 32"},
		{"unreachable JWKS", Config{JWKSURL: "http://127.0.0.1:1/jwks"}, "fetch JWKS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := New(t.Context(), tt.cfg)
			if err == nil {
				v.Close()
				t.Fatal("New succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestPrincipalContext(t *testing.T) {
	if _, ok := FromContext(t.Context()); ok {
		t.Fatal("FromContext found a principal in an empty context")
	}
	ctx := WithPrincipal(t.Context(), Principal{User: "alice"})
	p, ok := FromContext(ctx)
	if !ok || p.User != "alice" {
		t.Fatalf("FromContext = %+v, %v", p, ok)
	}
}

// TestGroupsAndOperators: the groups claim (configurable name, a string or a list) becomes
// Principal.Groups; operators are named users or members of the operator group.
func TestGroupsAndOperators(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	now := time.Now()
	tests := []struct {
		name       string
		cfg        Config
		claims     jwt.MapClaims
		wantGroups []string
		wantOp     bool
	}{
		{"default claim list", Config{}, jwt.MapClaims{"groups": []any{"proj42", "lab"}}, []string{"proj42", "lab"}, false},
		{"default claim string", Config{}, jwt.MapClaims{"groups": "proj42"}, []string{"proj42"}, false},
		{"custom claim", Config{GroupsClaim: "roles"}, jwt.MapClaims{"roles": []any{"x"}, "groups": []any{"y"}}, []string{"x"}, false},
		{"junk values ignored", Config{}, jwt.MapClaims{"groups": []any{1, "ok", nil}}, []string{"ok"}, false},
		{"operator user", Config{Operators: []string{"alice"}}, jwt.MapClaims{}, nil, true},
		{"operator group", Config{OperatorGroup: "ops"}, jwt.MapClaims{"groups": []any{"ops"}}, []string{"ops"}, true},
		{"not an operator", Config{Operators: []string{"carol"}, OperatorGroup: "ops"}, jwt.MapClaims{"groups": []any{"lab"}}, []string{"lab"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.HS256Secret = secret
			v, err := New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			c := jwt.MapClaims{"sub": "alice", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
			for k, x := range tt.claims {
				c[k] = x
			}
			tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
			p, err := v.Verify(t.Context(), tok)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(p.Groups) != fmt.Sprint(tt.wantGroups) || p.Operator != tt.wantOp {
				t.Fatalf("principal %+v, want groups %v operator %v", p, tt.wantGroups, tt.wantOp)
			}
		})
	}
}

// TestKeptHS256Expires: an HS256 token accepted (and kept, see verifiedHS256) is accepted again
// while its time claims hold, with the same principal, and refused as expired, like a token
// never seen, once now passes exp plus Leeway; the kept tokens stay bounded.
func TestKeptHS256Expires(t *testing.T) {
	v, err := NewHS256Verifier(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	// exp such that the token is accepted for one to two more seconds (NumericDate has whole
	// seconds).
	exp := time.Now().Add(-Leeway + 2*time.Second).Unix()
	tok := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "groups": []string{"g1"}}, nil)
	for i := range 2 {
		p, err := v.Verify(t.Context(), tok)
		if err != nil {
			t.Fatalf("use %d: %v", i, err)
		}
		if p.User != "alice" || len(p.Groups) != 1 || p.Groups[0] != "g1" {
			t.Fatalf("use %d: principal %+v", i, p)
		}
	}
	if _, ok := v.hs.Load(tok); !ok {
		t.Fatal("the accepted HS256 token was not kept")
	}
	until := time.Unix(exp, 0).Add(Leeway)
	for time.Now().Before(until) { // the clock reaching the end of the token's window
		time.Sleep(until.Sub(time.Now()) + time.Millisecond)
	}
	_, err = v.Verify(t.Context(), tok)
	var ae *Error
	if !errors.As(err, &ae) || ae.Public != "token expired" {
		t.Fatalf("expired kept token: %v, want token expired", err)
	}

	// Not valid yet (nbf), then refused: never kept.
	nbf := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix(),
		"nbf": time.Now().Add(2 * Leeway).Unix()}, nil)
	if _, err := v.Verify(t.Context(), nbf); err == nil {
		t.Fatal("a token not valid yet was accepted")
	}
	if _, ok := v.hs.Load(nbf); ok {
		t.Fatal("a refused token was kept")
	}

	// A token longer than maxKeptTokenBytes is accepted but not kept (the memory bound).
	long := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "carol", "exp": time.Now().Add(time.Hour).Unix(),
		"pad": strings.Repeat("x", maxKeptTokenBytes)}, nil)
	if _, err := v.Verify(t.Context(), long); err != nil {
		t.Fatalf("long token: %v", err)
	}
	if _, ok := v.hs.Load(long); ok {
		t.Fatal("a token longer than maxKeptTokenBytes was kept")
	}

	for i := range maxVerifiedHS256 + 10 {
		tok := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": fmt.Sprintf("u%d", i), "exp": time.Now().Add(time.Hour).Unix()}, nil)
		if _, err := v.Verify(t.Context(), tok); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	v.hs.Range(func(any, any) bool { n++; return true })
	if n > maxVerifiedHS256 {
		t.Fatalf("%d tokens kept, want at most %d", n, maxVerifiedHS256)
	}
}
