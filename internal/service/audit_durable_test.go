package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/postgres"
	"github.com/sshapi/sshapi/internal/store/sqlite"
)

// TestAuditSurvivesKill: every action `sshapi serve` acknowledged is in the audit even when the
// process is killed (SIGKILL) right after the last answer, on SQLite and on PostgreSQL. Twenty
// clients each create a system (an entry the handler writes) and then grants on it (entries the
// request wrapper writes, through the group-commit writer).
func TestAuditSurvivesKill(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sshapi.db")
		entries := auditedThenKilled(t, path)
		db, err := sqlite.Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		checkAudit(t, db, entries)
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.New(t).NewDatabase(t)
		entries := auditedThenKilled(t, url)
		db, err := postgres.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		checkAudit(t, db, entries)
	})
}

const (
	auditClients = 20
	auditGrants  = 10 // per client, after its system
)

// acked is one acknowledged action: the system it created, or the request id of a grant.
type acked struct {
	system    string
	requestID string
}

// auditedThenKilled runs the clients' actions against one instance on db, kills it with SIGKILL
// right after the last answer and returns the acknowledged actions.
func auditedThenKilled(t *testing.T, db string) []acked {
	d := newDeploymentOn(t, db)
	in := d.start("audit")
	hostKey, err := sshtest.NewPrivateKey("ed25519", 0)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(hostKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	sshKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	var mu sync.Mutex
	var done []acked
	var wg sync.WaitGroup
	errs := make(chan error, auditClients)
	for c := range auditClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("sys%02d", c)
			code, _, err := d.tryID(in, "POST", "/v1/systems", map[string]any{"id": id, "host": "127.0.0.1", "port": 22, "host_keys": []string{sshKey}})
			if err != nil || code != http.StatusCreated {
				errs <- fmt.Errorf("create %s: %d %v", id, code, err)
				return
			}
			mu.Lock()
			done = append(done, acked{system: id})
			mu.Unlock()
			for g := range auditGrants {
				code, reqID, err := d.tryID(in, "POST", "/v1/systems/"+id+"/grants", map[string]any{"principal": fmt.Sprintf("user:u%d", g), "path": "/scratch", "access": "read"})
				if err != nil || code != http.StatusCreated {
					errs <- fmt.Errorf("grant on %s: %d %v", id, code, err)
					return
				}
				mu.Lock()
				done = append(done, acked{system: id, requestID: reqID})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	in.kill()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return done
}

// checkAudit asserts that every acknowledged action has its entry in db.
func checkAudit(t *testing.T, db store.Store, want []acked) {
	t.Helper()
	got, err := db.(store.AccessStore).QueryAudit(context.Background(), &store.AuditQueryParams{Visible: "alice", Limit: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{}
	grants := map[string]bool{}
	for _, e := range got {
		switch e.Action {
		case "system.create":
			created[e.SystemID] = true
		case "POST /v1/systems/{id}/grants":
			grants[e.RequestID] = true
		}
	}
	missing := 0
	for _, a := range want {
		if (a.requestID == "" && !created[a.system]) || (a.requestID != "" && !grants[a.requestID]) {
			missing++
		}
	}
	if len(want) != auditClients*(1+auditGrants) || missing > 0 {
		t.Fatalf("%d of %d acknowledged actions (of %d made) missing from the audit after SIGKILL", missing, len(want), auditClients*(1+auditGrants))
	}
}

// tryID sends a JSON request through in and returns the status and the X-Request-Id answered.
func (d *deployment) tryID(in *instance, method, path string, body any) (int, string, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(d.t.Context(), method, in.url+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+d.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, res.Header.Get("X-Request-Id"), nil
}
