package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// inproc is a service started in this process, with a token for alice.
type inproc struct {
	t    testing.TB
	svc  *Service
	base string
	tok  string
}

func startInproc(t testing.TB, cfg config.Config) *inproc {
	t.Helper()
	svc, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sec, err := TokenSecret(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := auth.IssueHS256(sec, "alice", time.Hour, time.Now())
	p := &inproc{t: t, svc: svc, base: "http://" + svc.Addr(), tok: tok}
	t.Cleanup(p.stop)
	return p
}

func (p *inproc) stop() {
	if p.svc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.svc.Stop(ctx); err != nil {
		p.t.Errorf("stop: %v", err)
	}
	p.svc = nil
}

func (p *inproc) do(method, path string, body any) (int, string) {
	p.t.Helper()
	code, out, err := p.try(method, path, body)
	if err != nil {
		p.t.Fatal(err)
	}
	return code, out
}

// try is do without failing the test, for goroutines.
func (p *inproc) try(method, path string, body any) (int, string, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(p.t.Context(), method, p.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+p.tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), nil
}

func (p *inproc) must(method, path string, body any) string {
	p.t.Helper()
	code, out := p.do(method, path, body)
	if code >= 300 {
		p.t.Fatalf("%s %s: %d %s", method, path, code, out)
	}
	return out
}

func (p *inproc) register(srv *sshtest.Server, id string) {
	p.must("POST", "/v1/systems", map[string]any{"id": id, "host": srv.Host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}})
	p.must("PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)})
}

// runs checks that a command through system id works (the credential opens).
func (p *inproc) runs(id string) {
	p.t.Helper()
	if out := p.must("POST", "/v1/systems/"+id+"/commands", map[string]any{"command": "echo ok-" + id}); !strings.Contains(out, "ok-"+id) {
		p.t.Fatalf("command through %s: %s", id, out)
	}
}

func keyLine(t *testing.T) string {
	t.Helper()
	l, err := secret.NewKeyLine()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestKeysRotate: with a new primary key configured before the old one, RotateKeys re-wraps
// every credential (while the service runs); afterwards the old key can be dropped and the
// credentials still open.
func TestKeysRotate(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	oldKey, newKey := keyLine(t), keyLine(t)
	cfg := config.Default()
	cfg.DataDir, cfg.Addr = filepath.Join(t.TempDir(), "data"), "127.0.0.1:0"
	cfg.Keys.MasterKeys = oldKey
	p := startInproc(t, cfg)
	p.register(srv, "a")
	p.register(srv, "b")
	p.runs("a")
	p.stop()

	cfg.Keys.MasterKeys = newKey + "," + oldKey
	p = startInproc(t, cfg)
	n, err := RotateKeys(t.Context(), cfg) // while the service runs
	if err != nil || n != 2 {
		t.Fatalf("rotate: %d %v, want 2 credentials re-wrapped", n, err)
	}
	p.runs("b")
	if n, err := RotateKeys(t.Context(), cfg); err != nil || n != 0 {
		t.Fatalf("second rotate: %d %v, want 0", n, err)
	}
	p.stop()

	cfg.Keys.MasterKeys = newKey // the old key is gone
	p = startInproc(t, cfg)
	p.runs("a")
	p.runs("b")
}

// TestMigrateSQLiteToPostgres copies a single-instance deployment (systems, sealed credentials,
// audit, a finished transfer) into PostgreSQL; an instance on PostgreSQL with the same keys
// serves all of it.
func TestMigrateSQLiteToPostgres(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	dir := srv.MkTemp(t)
	key := keyLine(t)
	cfg := config.Default()
	cfg.DataDir, cfg.Addr = filepath.Join(t.TempDir(), "data"), "127.0.0.1:0"
	cfg.Keys.MasterKeys = key
	cfg.Keys.TokenSecret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC0xMjM0NTY3OA=="
	p := startInproc(t, cfg)
	p.register(srv, "hpc")
	p.must("POST", "/v1/systems/hpc/commands", map[string]any{"command": "head -c 3000000 /dev/urandom > " + dir + "/f"})
	var tr struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	_ = json.Unmarshal([]byte(p.must("POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": "hpc", "path": dir + "/f"},
		"destination": map[string]any{"system": "hpc", "path": dir + "/g"}})), &tr)
	for deadline := time.Now().Add(time.Minute); ; {
		_ = json.Unmarshal([]byte(p.must("GET", "/v1/transfers/"+tr.ID, nil)), &tr)
		if tr.Status == "succeeded" {
			break
		}
		if time.Now().After(deadline) || tr.Status == "failed" {
			t.Fatalf("transfer: %+v", tr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	audit := p.must("GET", "/v1/audit", nil)
	p.stop()

	url := pgtest.New(t).NewDatabase(t)
	rep, err := CopyDeployment(t.Context(), filepath.Join(cfg.DataDir, DatabaseFile), "", url)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Systems != 1 || rep.Credentials != 1 || rep.Audit == 0 || rep.Transfers.Transfers != 1 || rep.Transfers.Items != 1 {
		t.Fatalf("copied %+v", rep)
	}
	if _, err := CopyDeployment(t.Context(), filepath.Join(cfg.DataDir, DatabaseFile), "", url); err == nil {
		t.Fatal("a second copy into the same database was not refused")
	}
	cfg.Database, cfg.DataDir = url, filepath.Join(t.TempDir(), "other")
	p = startInproc(t, cfg)
	p.runs("hpc")
	var got struct {
		Status     string `json:"status"`
		BytesTotal int64  `json:"bytes_total"`
	}
	_ = json.Unmarshal([]byte(p.must("GET", "/v1/transfers/"+tr.ID, nil)), &got)
	if got.Status != "succeeded" || got.BytesTotal != 3000000 {
		t.Fatalf("copied transfer: %+v", got)
	}
	var before, after struct {
		Entries []json.RawMessage `json:"entries"`
	}
	_ = json.Unmarshal([]byte(audit), &before)
	_ = json.Unmarshal([]byte(p.must("GET", "/v1/audit", nil)), &after)
	if len(before.Entries) == 0 || len(after.Entries) < len(before.Entries) {
		t.Fatalf("audit: %d entries before, %d after the copy", len(before.Entries), len(after.Entries))
	}
}
