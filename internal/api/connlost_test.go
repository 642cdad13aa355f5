package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// killSSHConnections kills the test sshd's per-connection processes (and their sessions), as a
// crash of those processes would: the listener stays up.
func (e *env) killSSHConnections() {
	e.t.Helper()
	pids := e.srv.ConnectionPIDs()
	if len(pids) == 0 {
		e.t.Fatal("no sshd connection process to kill")
	}
	for _, pid := range pids {
		e.srv.KillConnection(pid)
	}
}

// TestConnectionKilledBetweenRequests: a request that arrives after its pooled connection died
// succeeds on a fresh connection, on the command, study and file routes.
func TestConnectionKilledBetweenRequests(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	if r := e.do("alice", "POST", "/sshapi/v2", map[string]any{"name": "study", "hostname": e.srv.Host, "port": e.srv.Port, "username": e.srv.User,
		"private_key": string(e.srv.PrivateKeyPEM), "host_key": e.srv.AuthorizedHostKey()}); r.status != 201 {
		t.Fatalf("create study system: %d %s", r.status, r.body)
	}
	requests := []struct{ method, path string }{
		{"POST", "/v1/systems/hpc/commands"},
		{"POST", "/sshapi/v2/study"},
		{"GET", "/v1/systems/hpc/stat/~"},
		{"GET", "/v1/systems/hpc/ls/~"},
		{"GET", "/v1/systems/hpc/df/~"},
	}
	for _, rq := range requests {
		for round := range 3 {
			var body any
			if rq.method == "POST" {
				body = map[string]any{"command": "echo ok"}
			}
			if r := e.do("alice", rq.method, rq.path, body); r.status != 200 { // a pooled connection to kill
				t.Fatalf("%s %s before the kill: %d %s", rq.method, rq.path, r.status, r.body)
			}
			e.killSSHConnections()
			if r := e.do("alice", rq.method, rq.path, body); r.status != 200 {
				t.Fatalf("%s %s right after the connection was killed (round %d): %d %s", rq.method, rq.path, round, r.status, r.body)
			}
		}
	}
}

// TestConnectionLostWhileCommandRuns: a command whose connection dies while it runs is a 502 with
// Retry-After that says the command may have run (never a 500, never retried), buffered and
// streamed.
func TestConnectionLostWhileCommandRuns(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	for _, ndjson := range []bool{false, true} {
		t.Run(fmt.Sprintf("ndjson=%v", ndjson), func(t *testing.T) {
			started := filepath.Join(dir, fmt.Sprintf("started-%v", ndjson))
			var hdr []string
			if ndjson {
				hdr = []string{"Accept", "application/x-ndjson"}
			}
			done := make(chan resp, 1)
			go func() {
				done <- e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo x >> " + started + "; sleep 30"}, hdr...)
			}()
			awaitState(t, "the command to start", func() bool { b, _ := os.ReadFile(started); return len(b) > 0 })
			e.killSSHConnections()
			r := <-done
			var p Problem
			if !ndjson {
				if r.status != 502 || r.header.Get("Retry-After") == "" {
					t.Fatalf("got %d (Retry-After %q) %s, want 502 with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
				}
				_ = json.Unmarshal(r.body, &p)
			} else {
				// The stream had not begun (no output yet): still a status code.
				if r.status != 502 || r.header.Get("Retry-After") == "" {
					t.Fatalf("streamed: got %d (Retry-After %q) %s, want 502 with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
				}
				_ = json.Unmarshal(r.body, &p)
			}
			if !strings.Contains(p.Detail, "may have run") {
				t.Fatalf("detail does not say the command may have run: %s", r.body)
			}
			if b, _ := os.ReadFile(started); !bytes.Equal(b, []byte("x\n")) {
				t.Fatalf("the command ran %d times", bytes.Count(b, []byte("x")))
			}
		})
	}
	// Output already streamed: the last line is an error event with the 502 problem.
	req, err := http.NewRequestWithContext(t.Context(), "POST", e.url+"/v1/systems/hpc/commands", strings.NewReader(`{"command":"echo begun; sleep 30"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	req.Header.Set("Accept", "application/x-ndjson")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), "begun") {
		t.Fatalf("first event: %d %q %v", res.StatusCode, sc.Text(), sc.Err())
	}
	e.killSSHConnections()
	var last struct {
		Type  string  `json:"type"`
		Error Problem `json:"error"`
	}
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		_ = json.Unmarshal(sc.Bytes(), &last)
	}
	if res.StatusCode != 200 || last.Type != "error" || last.Error.Status != 502 || !strings.Contains(last.Error.Detail, "may have run") {
		t.Fatalf("stream after output: %d %s", res.StatusCode, lines)
	}
}

// TestNoInternalErrorsWhenSSHDDies runs commands, listings and stats from several clients while
// sshd's connection processes are killed and sshd itself is restarted: every answer is a 200, or
// a 502 or 503 with Retry-After; none is a 500.
func TestNoInternalErrorsWhenSSHDDies(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	requests := []struct{ method, path string }{
		{"POST", "/v1/systems/hpc/commands"},
		{"POST", "/v1/systems/hpc/commands"},
		{"GET", "/v1/systems/hpc/ls" + dir},
		{"GET", "/v1/systems/hpc/stat" + dir + "/f"},
		{"GET", "/v1/systems/hpc/content" + dir + "/f"},
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	var ok, unavailable atomic.Int64
	var mu sync.Mutex
	var bad []string
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rq := requests[i%len(requests)]
			var body any
			if rq.method == "POST" {
				body = map[string]any{"command": "echo ok; sleep 0.0$RANDOM"}
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := e.do("alice", rq.method, rq.path, body)
				switch {
				case r.status == 200:
					ok.Add(1)
				case (r.status == 502 || r.status == 503) && r.header.Get("Retry-After") != "":
					unavailable.Add(1)
				default:
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s %s: %d (Retry-After %q) %s", rq.method, rq.path, r.status, r.header.Get("Retry-After"), r.body))
					mu.Unlock()
				}
			}
		}()
	}
	progress := func(what string) {
		n := ok.Load()
		awaitState(t, what, func() bool { return ok.Load() >= n+20 })
	}
	progress("load to flow")
	for range 5 {
		e.killSSHConnections()
		progress("requests to succeed after the connections were killed")
	}
	for range 2 {
		e.srv.Kill()
		awaitState(t, "the pool to drop the dead connections", func() bool { return e.pool.Stats().Conns == 0 })
		if err := e.srv.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
		progress("requests to succeed after the restart")
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	t.Logf("%d answered 200, %d 502/503 with Retry-After", ok.Load(), unavailable.Load())
	if len(bad) > 0 {
		t.Fatalf("%d answers were neither 200 nor 502/503 with Retry-After, e.g.:\n%s", len(bad), strings.Join(bad[:min(len(bad), 10)], "\n"))
	}
}
