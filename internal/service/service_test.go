package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
)

// TestServiceOnEmbeddedDefaults starts the service the way `sshapi serve` does on a fresh data
// directory: secrets are generated private, the API answers, a dev token is accepted, and it
// stops cleanly. A second start reuses the same secrets.
func TestServiceOnEmbeddedDefaults(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	for round := range 2 {
		svc, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		base := "http://" + svc.Addr()
		for _, p := range []string{"/healthz", "/readyz", "/v1/version"} {
			res, err := http.Get(base + p)
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("round %d %s: %v %v", round, p, err, res)
			}
			res.Body.Close()
		}
		sec, err := DevSecret(cfg.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := auth.IssueHS256(sec, "alice", time.Minute, time.Now())
		req, _ := http.NewRequest("GET", base+"/v1/systems", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		_ = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if res.StatusCode != 200 || body["systems"] == nil {
			t.Fatalf("round %d: dev token rejected: %d %v", round, res.StatusCode, body)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := svc.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	for _, f := range []string{MasterKeyFile, JWTSecretFile} {
		fi, err := os.Stat(filepath.Join(cfg.DataDir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, fi, err)
		}
	}
	if fi, err := os.Stat(cfg.DataDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v", fi.Mode())
	}
}
