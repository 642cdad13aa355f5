package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/service"
	"github.com/sshapi/sshapi/internal/slurmtest"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestJobsVerbs drives `sshapi jobs` against a real service, sshd and Slurm cluster (SLURM_CONF
// from the jobs configuration).
func TestJobsVerbs(t *testing.T) {
	cl := slurmtest.New(t, slurmtest.Options{})
	srv := sshtest.New(t, sshtest.Options{})
	cfg := config.Default()
	cfg.DataDir, cfg.Addr, cfg.LogLevel = t.TempDir(), "127.0.0.1:0", "error"
	cfg.Jobs.PollInterval = 250 * time.Millisecond
	cfg.Jobs.Scheduler.Env = map[string]string{"SLURM_CONF": cl.Conf}
	ctx := t.Context()
	svc, err := service.New(ctx, cfg, newLogger(cfg, os.Stderr))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	})
	sec, err := service.DevSecret(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.IssueHS256(sec, "cli-user", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := &verbEnv{url: "http://" + svc.Addr(), token: tok, srv: srv, remote: srv.MkTemp(t)}
	e.call(t, "POST", "/v1/systems", map[string]any{"id": "hpc", "host": srv.Host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}})
	e.call(t, "PUT", "/v1/systems/hpc/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)})
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("SSHAPI_URL", e.url)
	t.Setenv("SSHAPI_TOKEN", e.token)

	script := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"hi $WHO\"\nsleep 0.5\necho bye\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(mustRun(t, "jobs", "submit", "hpc", script, "-J", "cli job", "-D", e.remote, "-o", "cli-%j.out", "--env", "WHO=there", "-t", "5"))
	if out := mustRun(t, "jobs", "tail", "-f", "hpc", id); out != "hi there\nbye\n" {
		t.Fatalf("tail -f: %q", out)
	}
	if out := mustRun(t, "jobs", "tail", "-c", "4", "hpc", id); out != "bye\n" {
		t.Fatalf("tail: %q", out)
	}
	if out := mustRun(t, "jobs", "ls", "hpc", "--state", "completed"); !strings.Contains(out, id) || !strings.Contains(out, "cli job") {
		t.Fatalf("ls: %s", out)
	}
	if out := mustRun(t, "jobs", "show", "--script", "hpc", id); !strings.Contains(out, `"state": "completed"`) || !strings.Contains(out, "echo bye") {
		t.Fatalf("show: %s", out)
	}
	sleeper := filepath.Join(t.TempDir(), "sleep.sh")
	if err := os.WriteFile(sleeper, []byte("#!/bin/sh\nsleep 60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.TrimSpace(mustRun(t, "jobs", "submit", "hpc", sleeper, "-D", e.remote, "-o", "/dev/null"))
	code, _, stderr := sshapi(t, "jobs", "submit", "hpc", "/nonexistent/job.sh", "--remote")
	if code == 0 || !strings.Contains(stderr, "script_path") {
		t.Fatalf("remote script outside reach: %d %s", code, stderr)
	}
	mustRun(t, "jobs", "cancel", "hpc", long)
	code, _, stderr = sshapi(t, "jobs", "cancel", "hpc", "999999")
	if code == 0 || !strings.Contains(stderr, "404") && !strings.Contains(strings.ToLower(stderr), "not found") {
		t.Fatalf("cancel unknown: %d %s", code, stderr)
	}
}
