package sshpool

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// killConnections kills every per-connection sshd process of srv and waits until p has dropped
// all its connections (the client read the end of each).
func killConnections(t *testing.T, srv *sshtest.Server, p *Pool) {
	t.Helper()
	pids := srv.ConnectionPIDs()
	if len(pids) == 0 {
		t.Fatal("no sshd connection process to kill")
	}
	for _, pid := range pids {
		srv.KillConnection(pid)
	}
	waitFor(t, "the pool to drop the dead connections", func() bool { return p.Stats().Conns == 0 })
}

// TestStartOnDeadConnectionNotStarted: a session whose connection died before its exec request
// was sent fails with ErrNotStarted and ErrConnLost, so the caller may start the command again.
func TestStartOnDeadConnectionNotStarted(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "dead", srv.Signer)
	sess, err := p.NewSession(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	killConnections(t, srv, p)
	err = sess.Start("true")
	if !errors.Is(err, ErrNotStarted) || !errors.Is(err, ErrConnLost) {
		t.Fatalf("Start on a dead connection: %v, want ErrNotStarted and ErrConnLost", err)
	}
	// The next session is on a fresh connection.
	if out, err := run(t.Context(), p, tg, "echo ok"); err != nil || out != "ok\n" {
		t.Fatalf("after the loss: %q %v", out, err)
	}
}

// TestStartSentThenLostMayHaveRun: when the exec request left for the server and the connection
// died before the answer, the failure is ErrConnLost without ErrNotStarted: the command may run.
func TestStartSentThenLostMayHaveRun(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "sent", srv.Signer)
	sess, err := p.NewSession(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	pids := srv.ConnectionPIDs()
	if len(pids) != 1 {
		t.Fatalf("sshd connection processes: %v, want one", pids)
	}
	// Freeze the connection's sshd so the request is written but not answered, then kill it.
	srv.StopConnection(pids[0])
	w := wireOf(sess.c.client)
	before := w.writes.Load()
	done := make(chan error, 1)
	go func() { done <- sess.Start("true") }()
	waitFor(t, "the exec request to be written", func() bool { return w.writes.Load() > before })
	srv.KillConnection(pids[0])
	err = <-done
	if !errors.Is(err, ErrConnLost) || errors.Is(err, ErrNotStarted) {
		t.Fatalf("Start lost after sending: %v, want ErrConnLost without ErrNotStarted", err)
	}
}

// TestOpenOnFrozenConnectionBounded: a pooled connection whose server stops answering (its sshd
// frozen, so writes still succeed) must not hold a channel open forever, whatever the caller's
// context: after OpenTimeout the connection is closed and the open succeeds on a fresh one.
// Keepalives are off here so that only the open's own bound can free it.
func TestOpenOnFrozenConnectionBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(ctx context.Context, p *Pool, tg Target) error
	}{
		{"exec", func(ctx context.Context, p *Pool, tg Target) error {
			out, err := run(ctx, p, tg, "echo ok")
			if err == nil && out != "ok\n" {
				err = fmt.Errorf("output %q", out)
			}
			return err
		}},
		{"shared sftp", func(ctx context.Context, p *Pool, tg Target) error {
			s, err := p.SFTP(ctx, tg)
			if err != nil {
				return err
			}
			_, err = s.Getwd()
			s.Done(err)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := sshtest.New(t, sshtest.Options{})
			p, _ := newPool(t, Config{OpenTimeout: 500 * time.Millisecond, KeepaliveInterval: time.Hour, SFTPIdlePerConn: -1})
			tg := target(t, srv, "frozen", srv.Signer)
			if _, err := run(t.Context(), p, tg, "true"); err != nil { // a pooled connection, idle now
				t.Fatal(err)
			}
			pids := srv.ConnectionPIDs()
			if len(pids) != 1 {
				t.Fatalf("sshd connection processes: %v, want one", pids)
			}
			srv.StopConnection(pids[0])
			t.Cleanup(func() { srv.KillConnection(pids[0]) })
			done := make(chan error, 1)
			go func() { done <- tc.open(t.Context(), p, tg) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("open after the connection froze: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the open still waits on the frozen connection after 20 s")
			}
			if st := p.Stats(); st.Conns != 1 {
				t.Fatalf("connections after the retry: %+v, want the fresh one only", st)
			}
		})
	}
}

// TestWireCoalescesConcurrentPackets: eight sessions on one connection send 2 MiB each at once
// to sha256sum on a stock sshd. Every byte arrives (the digests match), and the connection's
// wire wrote the packets in fewer write(2) calls than there were packets: packets queued while
// a write was under way left together. Without the coalescing every packet is its own write.
func TestWireCoalescesConcurrentPackets(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{MaxConnsPerHost: 1, MaxConnsPerOwnerHost: 1})
	tg := target(t, srv, "coalesce", srv.Signer)
	const n, size = 8, 2 << 20
	var w *wire
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		sess, err := p.NewSession(t.Context(), tg)
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if w == nil {
			w = wireOf(sess.c.client)
		} else if wireOf(sess.c.client) != w {
			t.Fatal("the sessions are on more than one connection")
		}
		data := make([]byte, size)
		_, _ = rand.Read(data)
		sum := sha256.Sum256(data)
		in, err := sess.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		sess.Stdout = &out
		if err := sess.Start("sha256sum"); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			_, err := in.Write(data)
			if cerr := in.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = sess.Wait()
			}
			if got, want := strings.Fields(out.String()), hex.EncodeToString(sum[:]); err == nil && (len(got) == 0 || got[0] != want) {
				err = fmt.Errorf("session %d: sha256sum says %q, want %s", i, out.String(), want)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	w.settle()
	packets, flushes := w.stats()
	t.Logf("%d packets in %d writes", packets, flushes)
	if packets < n*size/(32<<10) {
		t.Fatalf("%d packets for %d bytes: the wire does not see the connection's packets", packets, n*size)
	}
	if flushes*5 > packets*4 {
		t.Errorf("%d packets took %d write(2) calls: fewer than 1.25 packets per write, the wire does not coalesce", packets, flushes)
	}
}

// TestWireIdlePacketNotHeld: a lone request-reply on an idle connection is answered (its packet
// is written at once, not held for company), and an idle wire keeps no buffer.
func TestWireIdlePacketNotHeld(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "idle", srv.Signer)
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		out, err := run(ctx, p, tg, "echo ok")
		cancel()
		if err != nil || out != "ok\n" {
			t.Fatalf("echo: %q %v", out, err)
		}
	}
	sess, err := p.NewSession(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	w := wireOf(sess.c.client)
	_ = sess.Close()
	w.settle()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending != nil || w.flushing {
		t.Errorf("idle wire: pending %d bytes (cap %d), flushing %v", len(w.pending), cap(w.pending), w.flushing)
	}
}
