package sshpool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestSFTPOpenPipelined: the pool starts an SFTP channel's subsystem without waiting for the
// request's reply (the version exchange goes out beside it: two round trips, not three), as
// sshd's own log shows, and the channel works, shared and dedicated.
func TestSFTPOpenPipelined(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	ctx := t.Context()
	// sshd logs a channel request's want-reply flag at DEBUG1 (its config's first LogLevel wins,
	// so the line is changed, not appended).
	cfgPath := filepath.Join(srv.Dir, "sshd_config")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(cfg), "LogLevel VERBOSE", "LogLevel DEBUG1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "pipelined", srv.Signer)
	s, err := p.SFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Getwd(); err != nil {
		t.Fatalf("shared channel: %v", err)
	}
	l, err := p.DedicatedSFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Getwd(); err != nil {
		t.Fatalf("dedicated channel: %v", err)
	}
	_ = l.Close()
	s.Done(nil)
	log := srv.Log()
	if n := strings.Count(log, "request subsystem reply 0"); n < 2 {
		t.Fatalf("%d subsystem requests without a reply wanted, want 2 (shared and dedicated); sshd log:\n%s", n, log)
	}
	if strings.Contains(log, "request subsystem reply 1") {
		t.Fatalf("a subsystem request waited for its reply; sshd log:\n%s", log)
	}
}
