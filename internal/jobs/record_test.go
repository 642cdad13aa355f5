package jobs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRecordFixtures records the commands' output from the installed Slurm into
// testdata/slurm-<version>/ when SSHAPI_RECORD_SLURM=1 (run it on a machine with another Slurm
// release to cover it).
func TestRecordFixtures(t *testing.T) {
	if os.Getenv("SSHAPI_RECORD_SLURM") != "1" {
		t.Skip("set SSHAPI_RECORD_SLURM=1 to record fixtures")
	}
	e := setup(t)
	ctx := t.Context()
	ver, err := e.cluster.Command(ctx, "sbatch", "--version")
	if err != nil {
		t.Fatal(err)
	}
	ver = strings.TrimPrefix(strings.TrimSpace(ver), "slurm ")
	ver = strings.TrimPrefix(ver, "slurm-wlm ")
	done := e.submit(t, Spec{Script: "#!/bin/sh\necho ok\n", WorkingDir: e.dir, Name: "done"})
	failed := e.submit(t, Spec{Script: "#!/bin/sh\nexit 3\n", WorkingDir: e.dir, Name: "exit three", Output: "%x-%j.out"})
	sig := e.submit(t, Spec{Script: "#!/bin/sh\nkill -9 $$\n", WorkingDir: e.dir, Name: "signal"})
	e.wait(t, done, "finished")
	e.wait(t, failed, "finished")
	e.wait(t, sig, "finished")
	run := e.submit(t, Spec{Script: "#!/bin/sh\nsleep 60\n", WorkingDir: e.dir, Name: "odd Name=x y", TimeLimit: "10"})
	e.wait(t, run, "running")
	arr := e.submit(t, Spec{Script: "#!/bin/sh\nsleep 60\n", WorkingDir: e.dir, Name: "arr", Array: "1-3", Output: "a-%A_%a.out", ExtraArgs: []string{"--begin=now+1hour"}})
	dep := e.submit(t, Spec{Script: "#!/bin/sh\n", WorkingDir: e.dir, Name: "dep", Dependency: "afterok:" + run})
	held := e.submit(t, Spec{Script: "#!/bin/sh\n", WorkingDir: e.dir, Name: "held"})
	if err := e.slurm.Hold(ctx, e.srv.User, held); err != nil {
		t.Fatal(err)
	}
	canc := e.submit(t, Spec{Script: "#!/bin/sh\nsleep 60\n", WorkingDir: e.dir, Name: "cancelled", ExtraArgs: []string{"--begin=now+1hour"}})
	if err := e.slurm.Cancel(ctx, e.srv.User, canc); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the cancel land; the recording is not an assertion
	_ = dep
	_ = arr
	dir := filepath.Join("testdata", "slurm-"+ver)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var sq, sc bytes.Buffer
	if _, err := e.slurm.Run.Run(ctx, e.slurm.command(nil, "squeue", "--me", "-h", "-r", "-t", "all", "-O", squeueFormat()), nil, &sq, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if _, err := e.slurm.Run.Run(ctx, e.slurm.command(nil, "scontrol", "show", "-o", "job"), nil, &sc, os.Stderr); err != nil {
		t.Fatal(err)
	}
	// The test's home directory is the same on every machine only by luck: make it so.
	norm := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(e.dir), []byte("/home/u/t")) }
	_ = os.WriteFile(filepath.Join(dir, "squeue.txt"), norm(sq.Bytes()), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "scontrol.txt"), norm(sc.Bytes()), 0o644)
	t.Logf("recorded %s: %d and %d bytes", dir, sq.Len(), sc.Len())
}
