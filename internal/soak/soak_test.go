package soak

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildBinary builds cmd/sshapi into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sshapi")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sshapi/sshapi/cmd/sshapi").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSoakShort runs two instances behind HAProxy on a PostgreSQL primary with a streaming
// replica under mixed load for 95 s while the sshd is restarted, an instance is killed
// with SIGKILL, PostgreSQL fails over to the replica, the other instance is stopped with SIGTERM
// and a filesystem the uploads and a transfer write into is full, and fails on anything lost.
// The network faults (black hole, trickle) and the plain PostgreSQL restart run in the long
// soak (make soak); the wanem and pgtest tests cover their mechanics.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: not in -short")
	}
	bin := buildBinary(t)
	var log strings.Builder
	// Each fault once (Cycles), and a minute for the transfers to finish: a small transfer that
	// has not finished by then will not (the run fails either way, but within ~3 minutes).
	o := Options{Binary: bin, Duration: 95 * time.Second, Rate: 8, Instances: 2, FaultEvery: 8 * time.Second,
		Faults: []string{FaultSSHD, FaultKill, FaultFailover, FaultTerm, FaultDiskFull}, Cycles: 1,
		DrainFor: time.Minute, Progress: testWriter{t}}
	if d := os.Getenv("SOAK_TEST_DURATION"); d != "" {
		o.Duration, _ = time.ParseDuration(d)
	}
	if dir := os.Getenv("SOAK_TEST_OUT"); dir != "" {
		o.LogDir = dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	if rep != nil {
		_ = rep.WriteMarkdown(&log)
		t.Log("\n" + log.String())
		if dir := os.Getenv("SOAK_TEST_OUT"); dir != "" {
			_ = rep.WriteJSON(filepath.Join(dir, "soak.json"))
			_ = os.WriteFile(filepath.Join(dir, "soak.md"), []byte(log.String()), 0o644)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, w := range rep.Windows {
		seen[w.Fault] = true
	}
	for _, f := range o.Faults {
		if !seen[f] {
			t.Errorf("fault %s was not injected (windows %+v)", f, rep.Windows)
		}
	}
	if len(rep.Check.DiskFull) == 0 {
		t.Errorf("no write into the full filesystem was judged")
	}
	if rep.Check.UploadsAcknowledged == 0 || rep.Check.TransfersSucceeded == 0 || rep.Overall.Outcomes["ok"] == 0 {
		t.Errorf("too little load to mean anything: %+v, outcomes %v", rep.Check, rep.Overall.Outcomes)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
