package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
)

// TestServiceWithIdentityProvider runs the service against a JWKS on loopback the way a real
// deployment is configured: issuer and audience are required to start, the data-dir dev secret is
// off, and a refused token's 401 says only "invalid token" while the debug log has the reason.
func TestServiceWithIdentityProvider(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicKey.Bytes()
	b64 := base64.RawURLEncoding.EncodeToString
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{
			{"kty": "EC", "kid": "k1", "crv": "P-256", "x": b64(pub[1:33]), "y": b64(pub[33:])},
		}})
	}))
	defer idp.Close()

	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	cfg.Auth.JWKSURL = idp.URL
	cfg.Auth.Issuer = "https://idp.example"
	if _, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "issuer and audience are required") {
		t.Fatalf("New without an audience = %v, want a refusal", err)
	}
	cfg.Auth.Audience = "sshapi"

	var logs syncBuffer
	svc, err := New(t.Context(), cfg, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	}()
	if _, err := os.Stat(filepath.Join(cfg.DataDir, JWTSecretFile)); !os.IsNotExist(err) {
		t.Errorf("dev secret file made although the dev secret is off (%v)", err)
	}

	signed := func(aud string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "alice", "iss": cfg.Auth.Issuer, "aud": aud, "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dev, _ := auth.IssueHS256(make([]byte, 32), "alice", time.Hour, time.Now()) // any HS256 token
	tests := []struct {
		name   string
		token  string
		status int
		reason string // in the debug log, never in the body
	}{
		{"provider token", signed("sshapi"), 200, ""},
		{"token for another application", signed("other-app"), 401, "wrong audience"},
		{"HS256 token (dev secret off)", dev, 401, "signing method HS256 is invalid"},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest("GET", "http://"+svc.Addr()+"/v1/systems", nil)
		req.Header.Set("Authorization", "Bearer "+tc.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.name, res.StatusCode, body, tc.status)
		}
		if tc.status != 401 {
			continue
		}
		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil || p["detail"] != "unauthenticated: invalid token" {
			t.Errorf("%s: 401 body %s, want the generic detail only", tc.name, body)
		}
		found := false
		for _, l := range logs.lines() {
			if l["msg"] == "token refused" {
				r, _ := l["reason"].(string)
				found = found || strings.Contains(r, tc.reason)
				if strings.Contains(r, strings.Split(tc.token, ".")[1]) {
					t.Errorf("%s: the log line carries the token", tc.name)
				}
			}
		}
		if !found {
			t.Errorf("%s: no debug log line with the reason %q", tc.name, tc.reason)
		}
	}
}
