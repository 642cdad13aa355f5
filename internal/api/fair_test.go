package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/transfer"
	"github.com/sshapi/sshapi/internal/wanem"
)

// fairnessBound is the latency A's requests must stay under while B attacks. It is generous
// because CI machines are noisy; the measured figures are logged.
const fairnessBound = 5 * time.Second

// TestOneTenantCannotSlowAnother is issue 9's measurement, against a real sshd and the real API:
// while user B loops 50 parallel credential checks with a junk key against user A's host, runs 5
// transfers from a server that trickles bytes (wanem at 2 KiB/s) and tries to hold 500 SSE
// streams, A's first command on a cold pool and A's transfer start within fairnessBound. It runs
// once with the default limits and once with the credential-check rate limits lifted, so the
// pool's per-owner dial shares alone must keep B's failing dials off A's slots.
func TestOneTenantCannotSlowAnother(t *testing.T) {
	cases := []struct {
		name   string
		limits OwnerLimits
		// want429 says whether B's check loop must meet 429s (the rate limit) or none.
		want429 bool
	}{
		{"default limits", OwnerLimits{}, true},
		{"check rate limits lifted", OwnerLimits{CredentialChecksPerMinute: 1e6, CredentialChecksPerMinutePerCredential: 1e6}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { measureFairness(t, c.limits, c.want429) })
	}
}

// client sends requests from goroutines without touching testing.T.
type client struct {
	e  *env
	hc *http.Client
}

func (c client) call(ctx context.Context, user, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.e.url+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.e.token(user))
	return c.hc.Do(req)
}

func measureFairness(t *testing.T, limits OwnerLimits, want429 bool) {
	e, _ := newTransferEnvWith(t, transfer.Config{PollInterval: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond})
	e.api.limits = newLimits(limits)
	limits.setDefaults()
	c := client{e: e, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 600, MaxConnsPerHost: 0}}}
	t.Cleanup(c.hc.CloseIdleConnections)

	// A: two systems on the host; nothing has dialed them yet.
	e.register("alice", "hpc")
	e.registerAt("alice", "scratch", e.srv, e.srv.Addr)
	aDir := e.srv.MkTemp(t)
	aFile := make([]byte, 1<<20)
	_, _ = rand.Read(aFile)
	if err := os.WriteFile(filepath.Join(aDir, "a.bin"), aFile, 0o644); err != nil {
		t.Fatal(err)
	}
	ownTree(t, e.srv, aDir)

	// Baseline in the same run: A's first command on another cold system, before B starts.
	e.registerAt("alice", "base", e.srv, e.srv.Addr)
	start := time.Now()
	if r := e.do("alice", "POST", "/v1/systems/base/commands", map[string]any{"command": "echo hello"}); r.status != 200 {
		t.Fatalf("baseline command: %d %s", r.status, r.body)
	}
	baseline := time.Since(start)

	// B: a junk key for A's host, a server that trickles bytes, and a destination.
	if r := e.do("bob", "POST", "/v1/systems", map[string]any{"id": "victim", "host": e.srv.Host, "port": e.srv.Port, "host_keys": []string{e.srv.AuthorizedHostKey()}}); r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r := e.do("bob", "PUT", "/v1/systems/victim/credential", map[string]any{"username": e.srv.User, "private_key": junkKeyPEM(t)}); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	trickle, err := wanem.New(wanem.Config{Upstream: e.srv.Addr, Rate: 2 << 10, Buffer: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := trickle.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = trickle.Stop() }) // runs before the engine stops: stuck reads end
	e.registerAt("bob", "trickle", e.srv, trickle.Addr().String())
	e.registerAt("bob", "mine", e.srv, e.srv.Addr)
	bDir := e.srv.MkTemp(t)
	if err := os.WriteFile(filepath.Join(bDir, "b.bin"), aFile, 0o644); err != nil {
		t.Fatal(err)
	}
	ownTree(t, e.srv, bDir)

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()

	// B's 50 parallel credential-check loops.
	var checks200, checks429, checksOther atomic.Int64
	for range 50 {
		wg.Go(func() {
			for ctx.Err() == nil {
				res, err := c.call(ctx, "bob", "POST", "/v1/systems/victim/credential/check", nil)
				if err != nil {
					continue
				}
				var out checkResult
				_ = json.NewDecoder(res.Body).Decode(&out)
				res.Body.Close()
				switch {
				case res.StatusCode == 200 && !out.OK:
					checks200.Add(1)
				case res.StatusCode == 429 && res.Header.Get("Retry-After") != "":
					checks429.Add(1)
				default:
					checksOther.Add(1)
				}
			}
		})
	}

	// B's 5 transfers from the trickling server.
	var bIDs []string
	for i := range 5 {
		r := e.do("bob", "POST", "/v1/transfers", map[string]any{
			"source":      map[string]any{"system": "trickle", "path": filepath.Join(bDir, "b.bin")},
			"destination": map[string]any{"system": "mine", "path": filepath.Join(bDir, fmt.Sprintf("copy%d", i))}, "streams": 1})
		if r.status != 202 {
			t.Fatalf("bob's transfer %d: %d %s", i, r.status, r.body)
		}
		bIDs = append(bIDs, r.json(t)["id"].(string))
	}

	// B's 500 event streams; the ones accepted stay open until the end.
	var sse200, sse429, sseOther, sseDone atomic.Int64
	for i := range 500 {
		wg.Go(func() {
			defer sseDone.Add(1)
			res, err := c.call(ctx, "bob", "GET", "/v1/transfers/"+bIDs[i%len(bIDs)]+"/events", nil)
			if err != nil {
				sseOther.Add(1)
				return
			}
			defer res.Body.Close()
			switch {
			case res.StatusCode == 200:
				sse200.Add(1)
				sseDone.Add(1) // counted as settled; the stream itself stays open
				defer sseDone.Add(-1)
				_, _ = io.Copy(io.Discard, res.Body)
			case res.StatusCode == 429 && res.Header.Get("Retry-After") != "":
				sse429.Add(1)
			default:
				sseOther.Add(1)
			}
		})
	}

	// Await B's load: every stream settled, checks flowing, two transfers running.
	bRunning := func() (running, queued int) {
		for _, id := range bIDs {
			switch e.do("bob", "GET", "/v1/transfers/"+id, nil).json(t)["status"] {
			case "running":
				running++
			case "queued":
				queued++
			}
		}
		return running, queued
	}
	deadline := time.Now().Add(time.Minute)
	for {
		running, _ := bRunning()
		if sseDone.Load() >= 500 && checks200.Load()+checks429.Load() >= 5 && running == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob's load never established: streams settled %d, checks %d/%d, running %d",
				sseDone.Load(), checks200.Load(), checks429.Load(), running)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A's first command on a cold pool.
	start = time.Now()
	r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo hello"})
	cmdLatency := time.Since(start)
	if r.status != 200 || r.json(t)["stdout"] != "hello\n" {
		t.Fatalf("alice's command: %d %s", r.status, r.body)
	}
	// A's transfer, from submission until it runs.
	start = time.Now()
	r = e.do("alice", "POST", "/v1/transfers", map[string]any{
		"source":      map[string]any{"system": "hpc", "path": filepath.Join(aDir, "a.bin")},
		"destination": map[string]any{"system": "scratch", "path": filepath.Join(aDir, "copy.bin")}})
	if r.status != 202 {
		t.Fatalf("alice's transfer: %d %s", r.status, r.body)
	}
	aID := r.json(t)["id"].(string)
	var startLatency time.Duration
	for {
		m := e.do("alice", "GET", "/v1/transfers/"+aID, nil).json(t)
		if st := m["status"]; st != "queued" {
			startLatency = time.Since(start)
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("alice's transfer never started: %v", m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m := e.waitTransfer("alice", aID, time.Minute); m["status"] != "succeeded" {
		t.Fatalf("alice's transfer: %v", m)
	}
	running, queued := bRunning()
	t.Logf("alice's first command on a cold pool: %v (%v before bob started); alice's transfer started after %v (bound %v). Bob meanwhile: checks 200(ok=false)=%d 429=%d other=%d; streams 200=%d 429=%d other=%d; transfers running=%d queued=%d",
		cmdLatency.Round(time.Millisecond), baseline.Round(time.Millisecond), startLatency.Round(time.Millisecond), fairnessBound,
		checks200.Load(), checks429.Load(), checksOther.Load(), sse200.Load(), sse429.Load(), sseOther.Load(), running, queued)
	if cmdLatency > fairnessBound || startLatency > fairnessBound {
		t.Errorf("alice waited %v for her command and %v for her transfer to start; bound %v", cmdLatency, startLatency, fairnessBound)
	}
	if got := sse200.Load(); got != int64(limits.MaxEventStreamsPerOwner) || sse429.Load() != 500-got || sseOther.Load() != 0 {
		t.Errorf("bob's 500 streams: %d accepted, %d refused with 429, %d other; want %d accepted and the rest 429",
			got, sse429.Load(), sseOther.Load(), limits.MaxEventStreamsPerOwner)
	}
	if checksOther.Load() != 0 || (checks429.Load() > 0) != want429 {
		t.Errorf("bob's checks: 200=%d 429=%d other=%d (429s expected: %v)", checks200.Load(), checks429.Load(), checksOther.Load(), want429)
	}
	if running > 2 || queued < 3 {
		t.Errorf("bob's transfers: %d running, %d queued; his running limit is 2", running, queued)
	}
}
