package command

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// killingSessions lends sessions from a real pool, but the first time it kills the sshd process
// of the session's connection (and waits until the pool has noticed) before handing it over: the
// channel is open, the connection is gone, the exec request has not been sent.
type killingSessions struct {
	t      *testing.T
	pool   *sshpool.Pool
	srv    *sshtest.Server
	killed atomic.Bool
}

func (k *killingSessions) NewSession(ctx context.Context, t sshpool.Target) (*sshpool.Session, error) {
	sess, err := k.pool.NewSession(ctx, t)
	if err != nil || k.killed.Swap(true) {
		return sess, err
	}
	for _, pid := range k.srv.ConnectionPIDs() {
		k.srv.KillConnection(pid)
	}
	awaitCond(k.t, "the pool to drop the dead connection", func() bool { return k.pool.Stats().Conns == 0 })
	return sess, nil
}

func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRetriedWhenConnectionDiedBeforeExec: a command whose connection died after its channel
// opened but before the exec request was sent runs once, on a fresh connection (this was a 500
// "start command: EOF" before).
func TestRetriedWhenConnectionDiedBeforeExec(t *testing.T) {
	p, tg, srv := setup(t)
	if _, err := Run(t.Context(), p, tg, Request{Command: "true"}, nil); err != nil { // one pooled connection
		t.Fatal(err)
	}
	dir := srv.MkTemp(t)
	counter := filepath.Join(dir, "runs")
	res, err := Run(t.Context(), &killingSessions{t: t, pool: p, srv: srv}, tg, Request{Command: "echo x >> " + counter + "; echo ran"}, nil)
	if err != nil {
		t.Fatalf("not retried: %v", err)
	}
	if res.Stdout != "ran\n" {
		t.Fatalf("result %+v", res)
	}
	if b, _ := os.ReadFile(counter); !bytes.Equal(b, []byte("x\n")) {
		t.Fatalf("the command ran %d times", bytes.Count(b, []byte("x")))
	}
	// Helper commands (files.Runner) and subsystems are started again the same way.
	var out bytes.Buffer
	status, err := Exec{Pool: &killingSessions{t: t, pool: p, srv: srv}, Target: tg}.Run(t.Context(), "echo helper", nil, &out, nil)
	if err != nil || status != 0 || out.String() != "helper\n" {
		t.Fatalf("Exec.Run: %d %q %v", status, out.String(), err)
	}
	rw, err := Exec{Pool: &killingSessions{t: t, pool: p, srv: srv}, Target: tg}.OpenSubsystem(t.Context(), "sftp")
	if err != nil {
		t.Fatalf("OpenSubsystem: %v", err)
	}
	_ = rw.Close()
}

// TestConnectionLostWhileRunning: a connection that dies while its command runs is
// sshpool.ErrConnLost, not ErrNotStarted (the command did run), and is not retried.
func TestConnectionLostWhileRunning(t *testing.T) {
	p, tg, srv := setup(t)
	dir := srv.MkTemp(t)
	started := filepath.Join(dir, "started")
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), p, tg, Request{Command: "echo x >> " + started + "; sleep 30"}, nil)
		done <- err
	}()
	awaitCond(t, "the command to start", func() bool { b, _ := os.ReadFile(started); return len(b) > 0 })
	for _, pid := range srv.ConnectionPIDs() {
		srv.KillConnection(pid)
	}
	err := <-done
	if !errors.Is(err, sshpool.ErrConnLost) || errors.Is(err, ErrNotStarted) {
		t.Fatalf("got %v, want ErrConnLost without ErrNotStarted", err)
	}
	if b, _ := os.ReadFile(started); !bytes.Equal(b, []byte("x\n")) {
		t.Fatalf("the command ran %d times", bytes.Count(b, []byte("x")))
	}
}
