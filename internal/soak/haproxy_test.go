package soak

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestHAProxyNoInstance503 starts the soak's HAProxy in front of an instance that is not
// running: the balancer's own answer must be a well-formed 503 — Retry-After and a problem+json
// body — as the API's own unavailability answers are, so clients wait and retry.
func TestHAProxyNoInstance503(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, err := freeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	h, err := startHAProxy(ctx, t.TempDir(), []*instance{{name: "down", addr: addr}}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	res, err := http.Get("http://" + h.addr + "/v1/systems")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", res.StatusCode, body)
	}
	if ra := res.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p struct {
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Status != 503 || p.Title != "Service Unavailable" {
		t.Errorf("body %s: %+v %v", body, p, err)
	}
}
