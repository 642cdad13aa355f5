package slurmtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterRunsJob starts a cluster, runs a batch job to completion and reads its output.
func TestClusterRunsJob(t *testing.T) {
	start := time.Now()
	c := New(t, Options{})
	t.Logf("idle after %v", time.Since(start))
	ctx := context.Background()
	outFile := filepath.Join(t.TempDir(), "out")
	id, err := c.Command(ctx, "sbatch", "--parsable", "-o", outFile, "--wrap", "echo hello")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := c.Command(ctx, "scontrol", "show", "-o", "job", id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "JobState=COMPLETED") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not completed: %s", id, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, err := os.ReadFile(outFile)
	if err != nil || strings.TrimSpace(string(b)) != "hello" {
		t.Fatalf("output %q, %v", b, err)
	}
	if err := c.StopController(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Command(ctx, "scontrol", "ping"); err == nil {
		t.Fatal("ping succeeded with the controller stopped")
	}
	if err := c.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Command(ctx, "scontrol", "show", "-o", "job", id); err != nil || !strings.Contains(out, "COMPLETED") {
		t.Fatalf("job lost across a controller restart: %q %v", out, err)
	}
}
