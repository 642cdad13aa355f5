package transfer

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestUnreachableDestinationSaysWhy: with the destination's sshd down, the transfer shows status
// retrying, the last error, a retry count and the next attempt's time (read from the database,
// as any instance would), instead of "running" with no error; once canceled it stops.
func TestUnreachableDestinationSaysWhy(t *testing.T) {
	h := newHarness(t, testConfig())
	a := sshtest.New(t, sshtest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "down", a, down)
	dir := a.MkTemp(t)
	randomFile(t, filepath.Join(dir, "f"), 1<<20, 3)
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: filepath.Join(dir, "f")},
		Destination: Endpoint{System: "down", Path: filepath.Join(dir, "g")}})
	got := h.wait("alice", tr.ID, time.Minute, func(t *Transfer) bool { return t.Status == StatusRetrying && t.Retries >= 2 })
	if !strings.Contains(got.Error, "connection refused") || got.NextAttemptAt == nil || got.Attempts != 1 {
		t.Fatalf("retrying transfer: status %s error %q retries %d next %v attempts %d", got.Status, got.Error, got.Retries, got.NextAttemptAt, got.Attempts)
	}
	if d := time.Until(*got.NextAttemptAt); d > h.cfg.RetryMax+time.Second {
		t.Fatalf("next attempt %v away, beyond retry_max %v", d, h.cfg.RetryMax)
	}
	c, err := h.eng.Cancel(t.Context(), "alice", tr.ID)
	if err != nil || c.Status != StatusCanceled || c.NextAttemptAt != nil {
		t.Fatalf("cancel: %+v %v", c, err)
	}
}
