package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/transfer"
)

// junkKeyPEM is a private key no server authorizes.
func junkKeyPEM(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block))
}

// is429 reports whether r is a 429 problem with a Retry-After of at least one second.
func is429(r resp) bool {
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	return r.status == 429 && err == nil && ra >= 1 && r.header.Get("Content-Type") == "application/problem+json"
}

// TestPerOwnerLimitsOverHTTP: with all of a user's slots of a kind taken, the next request of
// that kind is 429 problem+json with Retry-After, another user's is not affected, and a freed slot
// serves the user again.
func TestPerOwnerLimitsOverHTTP(t *testing.T) {
	e, _ := newTransferEnvWith(t, transfer.Config{PollInterval: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond, MaxQueuedPerOwner: 1})
	for _, u := range []string{"alice", "bob"} {
		e.register(u, "hpc")
	}
	dir := e.srv.MkTemp(t)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ownTree(t, e.srv, dir)
	submit := func(user, name string) resp {
		return e.do(user, "POST", "/v1/transfers", map[string]any{
			"source": map[string]any{"system": "hpc", "path": filepath.Join(dir, "f")}, "destination": map[string]any{"system": "hpc", "path": filepath.Join(dir, name)}})
	}
	r := submit("alice", "copy")
	if r.status != 202 {
		t.Fatalf("transfer: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	e.waitTransfer("alice", id, time.Minute)
	var bobID string
	if r := submit("bob", "bobcopy"); r.status == 202 {
		bobID = r.json(t)["id"].(string)
		e.waitTransfer("bob", bobID, time.Minute)
	} else {
		t.Fatalf("bob's transfer: %d %s", r.status, r.body)
	}

	lim := e.api.limits
	// fill takes all of alice's slots of one kind, returning what gives them back.
	fill := func(slots *ownerSlots) func() []func() {
		return func() []func() {
			var held []func()
			for range slots.max {
				rel, err := slots.acquire("alice")
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, rel)
			}
			return held
		}
	}
	fillLoads := func() []func() {
		var held []func()
		for range e.api.loads.Share() {
			l, err := e.api.loads.TryAcquire("alice", 1)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l.Release)
		}
		return held
	}
	cases := []struct {
		name         string
		fill         func() []func()
		method, path string
		body         any
		bobPath      string
	}{
		{"command", fill(lim.commands), "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}, ""},
		{"fan-out command", fill(lim.commands), "POST", "/v1/commands", map[string]any{"systems": []string{"hpc"}, "command": "true"}, ""},
		{"study command", fill(lim.commands), "POST", "/sshapi/v2/hpc", map[string]any{"command": "true"}, ""},
		{"load run", fillLoads, "POST", "/sshapi/v2/load", map[string]any{"name": "hpc", "command": "true", "rate": 4, "duration_s": 0.5}, ""},
		{"event stream", fill(lim.streams), "GET", "/v1/transfers/" + id + "/events", nil, "/v1/transfers/" + bobID + "/events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			held := c.fill()
			if r := e.do("alice", c.method, c.path, c.body); !is429(r) {
				t.Fatalf("alice over her limit: %d %v %s, want 429 problem with Retry-After", r.status, r.header, r.body)
			}
			bobPath := c.path
			if c.bobPath != "" {
				bobPath = c.bobPath
			}
			if r := e.do("bob", c.method, bobPath, c.body); r.status != 200 {
				t.Fatalf("bob while alice is at her limit: %d %s", r.status, r.body)
			}
			for _, rel := range held {
				rel()
			}
			if r := e.do("alice", c.method, c.path, c.body); r.status != 200 {
				t.Fatalf("alice after her slots were freed: %d %s", r.status, r.body)
			}
		})
	}

	t.Run("queued transfers", func(t *testing.T) {
		// MaxQueuedPerOwner 1: while one of alice's transfers is unfinished, another is refused.
		// The first one's source refuses connections, so it keeps retrying until canceled.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := l.Addr().String()
		l.Close()
		e.registerAt("alice", "down", e.srv, closed)
		r := e.do("alice", "POST", "/v1/transfers", map[string]any{
			"source": map[string]any{"system": "down", "path": filepath.Join(dir, "f")}, "destination": map[string]any{"system": "hpc", "path": filepath.Join(dir, "x")}})
		if r.status != 202 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		first := r.json(t)["id"].(string)
		if r := submit("alice", "copy2"); !is429(r) || !strings.Contains(string(r.body), "queued or running") {
			t.Fatalf("second unfinished transfer: %d %s", r.status, r.body)
		}
		if r := submit("bob", "bobcopy2"); r.status != 202 {
			t.Fatalf("bob: %d %s", r.status, r.body)
		}
		if r := e.do("alice", "DELETE", "/v1/transfers/"+first, nil); r.status != 200 {
			t.Fatalf("cancel: %d %s", r.status, r.body)
		}
		if r := submit("alice", "copy3"); r.status != 202 {
			t.Fatalf("after the first was canceled: %d %s", r.status, r.body)
		}
	})

	t.Run("credential checks", func(t *testing.T) {
		e.api.limits = newLimits(OwnerLimits{CredentialChecksPerMinute: 6, CredentialChecksPerMinutePerCredential: 4}) // bursts 3 and 2
		e.register("alice", "hpc2")
		check := func(user, id string) resp { return e.do(user, "POST", "/v1/systems/"+id+"/credential/check", nil) }
		for i := range 2 {
			if r := check("alice", "hpc"); r.status != 200 {
				t.Fatalf("check %d: %d %s", i, r.status, r.body)
			}
		}
		if r := check("alice", "hpc"); !is429(r) {
			t.Fatalf("third check of one credential: %d %v %s", r.status, r.header, r.body)
		}
		if r := check("alice", "hpc2"); r.status != 200 { // another credential: the owner's third
			t.Fatalf("other credential: %d %s", r.status, r.body)
		}
		if r := check("alice", "hpc2"); !is429(r) { // the owner's bucket is empty
			t.Fatalf("owner over the rate: %d %s", r.status, r.body)
		}
		if r := check("bob", "hpc"); r.status != 200 {
			t.Fatalf("bob: %d %s", r.status, r.body)
		}
	})
}
