package sshpool

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshtest"
)

func target(t testing.TB, srv *sshtest.Server, name string, signer ssh.Signer) Target {
	t.Helper()
	cfg := &ssh.ClientConfig{User: srv.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}}
	if err := (HostKeyPolicy{Keys: []string{srv.AuthorizedHostKey()}}).Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return Target{
		Key:         Key{System: name, User: srv.User, Credential: ssh.FingerprintSHA256(signer.PublicKey())},
		Addr:        srv.Addr,
		Config:      cfg,
		MaxSessions: 10,
	}
}

func newPool(t *testing.T, cfg Config) (*Pool, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := New(cfg, nil, reg)
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return p, reg
}

func run(ctx context.Context, p *Pool, tg Target, cmd string) (string, error) {
	s, err := p.NewSession(ctx, tg)
	if err != nil {
		return "", err
	}
	defer s.Close()
	out, err := s.Output(cmd)
	return string(out), err
}

// TestConcurrentCommandsThroughStockSSHD runs far more concurrent commands than one connection's
// MaxSessions and than sshd's MaxStartups, across many credentials, and expects zero errors.
func TestConcurrentCommandsThroughStockSSHD(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	tests := []struct {
		name        string
		keys        int
		perKey      int
		wantMaxConn int
	}{
		{"one key, 300 at once", 1, 300, 6},
		{"40 keys x 8 at once (MaxStartups pressure)", 40, 8, 40 * 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, reg := newPool(t, Config{})
			var targets []Target
			for i := range tc.keys {
				signer := srv.Signer
				if i > 0 {
					signer = newSigner(t)
					if err := srv.AuthorizeKey(signer.PublicKey()); err != nil {
						t.Fatal(err)
					}
				}
				targets = append(targets, target(t, srv, fmt.Sprintf("sys%d", i), signer))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var failures atomic.Int64
			var firstErr atomic.Value
			for _, tg := range targets {
				for j := range tc.perKey {
					wg.Add(1)
					go func() {
						defer wg.Done()
						out, err := run(ctx, p, tg, fmt.Sprintf("echo hello-%d", j))
						if err == nil && strings.TrimSpace(out) != fmt.Sprintf("hello-%d", j) {
							err = fmt.Errorf("unexpected output %q", out)
						}
						if err != nil {
							failures.Add(1)
							firstErr.CompareAndSwap(nil, err)
						}
					}()
				}
			}
			wg.Wait()
			if n := failures.Load(); n > 0 {
				t.Fatalf("%d of %d commands failed; first: %v", n, tc.keys*tc.perKey, firstErr.Load())
			}
			st := p.Stats()
			if st.Conns > tc.wantMaxConn || st.Conns < tc.keys {
				t.Errorf("connections = %d, want between %d and %d", st.Conns, tc.keys, tc.wantMaxConn)
			}
			if st.ChannelsInUse != 0 || st.Waiters != 0 {
				t.Errorf("after the run: %+v, want nothing in use", st)
			}
			t.Logf("stats %+v, dials ok=%v refused=%v, open retries=%v", st,
				testutil.ToFloat64(p.metrics.dials.WithLabelValues("ok")),
				testutil.ToFloat64(p.metrics.dials.WithLabelValues("refused")),
				testutil.ToFloat64(p.metrics.openRetries))
			if _, err := reg.Gather(); err != nil {
				t.Errorf("metrics: %v", err)
			}
		})
	}
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAuthFailureTripsBreaker(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "bad", newSigner(t)) // not authorized on the server
	for i := range 3 {
		_, err := run(t.Context(), p, tg, "true")
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("attempt %d: err = %v, want ErrAuth", i, err)
		}
	}
	if n := testutil.ToFloat64(p.metrics.dials.WithLabelValues("auth_failed")); n != 1 {
		t.Fatalf("auth_failed dials = %v, want exactly 1 (breaker must stop redialing)", n)
	}
	// A new credential is a new key and dials again.
	good := target(t, srv, "bad", srv.Signer)
	if _, err := run(t.Context(), p, good, "true"); err != nil {
		t.Fatalf("new credential: %v", err)
	}
}

func TestHostKeyMismatchRefusedBeforeAuth(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "mitm", srv.Signer)
	other := newSigner(t)
	cb, err := HostKeyPolicy{Keys: []string{string(ssh.MarshalAuthorizedKey(other.PublicKey()))}}.Callback()
	if err != nil {
		t.Fatal(err)
	}
	tg.Config.HostKeyCallback = cb
	_, err = run(t.Context(), p, tg, "true")
	var hk *HostKeyError
	if !errors.Is(err, ErrHostKey) || !errors.As(err, &hk) {
		t.Fatalf("err = %v, want host key error", err)
	}
	if hk.Got != ssh.FingerprintSHA256(srv.HostKey) {
		t.Errorf("reported fingerprint %s, want the server's %s", hk.Got, ssh.FingerprintSHA256(srv.HostKey))
	}
	if strings.Contains(srv.Log(), "Accepted publickey") || strings.Contains(srv.Log(), "Failed publickey") {
		t.Errorf("the client attempted authentication after a host key mismatch:\n%s", srv.Log())
	}
}

func TestWaitersTimeOutWhenSaturated(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{MaxConnsPerKey: 1})
	tg := target(t, srv, "small", srv.Signer)
	tg.MaxSessions = 3 // one slot per connection
	held, err := p.NewSession(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := p.NewSession(ctx, tg); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := run(t.Context(), p, tg, "true")
		done <- err
	}()
	waitFor(t, "the second command to queue", func() bool { return p.Stats().Waiters == 1 })
	held.Close() // hands the slot to the queued waiter
	if err := <-done; err != nil {
		t.Fatalf("queued waiter: %v", err)
	}
}

func TestRecoversFromSSHDRestartUnderLoad(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "restart", srv.Signer)
	if _, err := run(t.Context(), p, tg, "true"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // also when a wait below fails the test
	var ok, failed atomic.Int64
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				_, err := run(ctx, p, tg, "echo x")
				cancel()
				if err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	waitFor(t, "load to flow", func() bool { return ok.Load() >= 40 })
	srv.Kill()
	waitFor(t, "the pool to drop the dead connections", func() bool { return p.Stats().Conns == 0 })
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := ok.Load()
	waitFor(t, "a command to succeed after the restart", func() bool { return ok.Load() > before+20 })
	halt()
	if ok.Load() <= before {
		t.Fatalf("no command succeeded after sshd came back (ok=%d failed=%d)", ok.Load(), failed.Load())
	}
	// Every command started on a fresh connection after the restart must work.
	for i := range 20 {
		if _, err := run(t.Context(), p, tg, "true"); err != nil {
			t.Fatalf("after restart, command %d: %v", i, err)
		}
	}
	t.Logf("during restart: ok=%d failed=%d (in-flight commands on killed connections fail; none may be retried)", ok.Load(), failed.Load())
}

func TestSharedSFTPConcurrent(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "sftp", srv.Signer)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := p.SFTP(t.Context(), tg)
			if err != nil {
				errs <- err
				return
			}
			_, err = s.Stat(srv.Home)
			s.Done(err)
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Conns != 1 {
		t.Errorf("connections = %d, want 1: metadata operations share one SFTP channel", st.Conns)
	}
	if st.SFTPBorrowers != 0 {
		t.Errorf("borrowers left: %d", st.SFTPBorrowers)
	}
	d, err := p.DedicatedSFTP(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Getwd(); err != nil {
		t.Fatal(err)
	}
	d.Close()
}

func TestStopDrainsInFlight(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p := New(Config{}, nil, nil)
	_ = p.Start(t.Context())
	tg := target(t, srv, "drain", srv.Signer)
	done := make(chan error, 1)
	go func() {
		out, err := run(t.Context(), p, tg, "sleep 0.5; echo finished")
		if err == nil && strings.TrimSpace(out) != "finished" {
			err = fmt.Errorf("output %q", out)
		}
		done <- err
	}()
	for p.Stats().ChannelsInUse == 0 { // wait until the command has its channel: it is in flight
		select {
		case err := <-done:
			t.Fatalf("command ended before Stop: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("in-flight command during shutdown: %v", err)
	}
	if _, err := p.NewSession(t.Context(), tg); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Stop: %v, want ErrClosed", err)
	}
}

func TestIdleEviction(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{IdleTimeout: time.Minute})
	tg := target(t, srv, "idle", srv.Signer)
	if _, err := run(t.Context(), p, tg, "true"); err != nil {
		t.Fatal(err)
	}
	p.evictIdle(time.Now())
	if p.Stats().Conns != 1 {
		t.Fatal("a fresh connection was evicted")
	}
	p.evictIdle(time.Now().Add(2 * time.Minute))
	if st := p.Stats(); st.Conns != 0 || st.Keys != 0 {
		t.Fatalf("idle connection kept: %+v", st)
	}
}

func TestForgetClosesConnections(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "owner/sys", srv.Signer)
	other := target(t, srv, "owner/other", srv.Signer)
	for _, x := range []Target{tg, other} {
		if _, err := run(t.Context(), p, x, "true"); err != nil {
			t.Fatal(err)
		}
	}
	p.Forget("owner/sys")
	if st := p.Stats(); st.Conns != 1 || st.Keys != 1 {
		t.Fatalf("after Forget: %+v, want only the other system's connection", st)
	}
	if _, err := run(t.Context(), p, tg, "true"); err != nil {
		t.Fatalf("after Forget the system dials again: %v", err)
	}
}

// TestSharedSFTPErrorProbesBeforeKilling: an error that only looks like a broken connection does
// not discard a healthy shared connection; a really dead one is discarded.
func TestSharedSFTPErrorProbesBeforeKilling(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{KeepaliveTimeout: time.Second})
	tg := target(t, srv, "probe", srv.Signer)
	s, err := p.SFTP(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	s.Done(errors.New("read header: unexpected EOF")) // healthy connection, misleading error
	time.Sleep(200 * time.Millisecond)
	if st := p.Stats(); st.Conns != 1 {
		t.Fatalf("a healthy connection was discarded: %+v", st)
	}
	s, err = p.SFTP(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	_, err = s.Stat("/")
	s.Done(err)
	deadline := time.Now().Add(3 * time.Second)
	for p.Stats().Conns != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("dead connection kept: %+v (stat error %v)", p.Stats(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor polls cond until it holds, failing the test after 20 s with what it waited for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConnected: a key the pool never dialed is not connected; once a channel was had it is
// (the connection stays pooled after the channel ends); a key whose dials fail is not.
func TestConnected(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "sys", srv.Signer)
	if p.Connected(tg.Key) {
		t.Fatal("connected before any dial")
	}
	if _, err := run(t.Context(), p, tg, "true"); err != nil {
		t.Fatal(err)
	}
	if !p.Connected(tg.Key) {
		t.Fatal("not connected after a command ran")
	}
	bad := target(t, srv, "bad", newSigner(t))
	if _, err := run(t.Context(), p, bad, "true"); !errors.Is(err, ErrAuth) {
		t.Fatalf("err = %v, want ErrAuth", err)
	}
	if p.Connected(bad.Key) {
		t.Fatal("connected after the only dial failed")
	}
}

// TestRTT: the pool knows no round trip to a system before a connection to it carried an SFTP
// channel, and one after (timed beside the channel's start); a command alone measures none.
func TestRTT(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "sys", srv.Signer)
	if _, ok := p.RTT(tg.Key); ok {
		t.Fatal("a round trip before any dial")
	}
	if _, err := run(t.Context(), p, tg, "true"); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.RTT(tg.Key); ok {
		t.Fatal("a round trip measured without an SFTP channel")
	}
	l, err := p.DedicatedSFTP(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d, ok := p.RTT(tg.Key); !ok || d <= 0 {
		t.Fatalf("RTT = %v, %v after an SFTP channel opened", d, ok)
	}
}

// TestNoSFTPSubsystemFailsAtOnce: on a server without an SFTP subsystem (SFTP turned off), a
// file operation fails with the server's refusal, not after the channel-open timeout: sshd
// answers a subsystem it lacks only to a request that wants a reply and otherwise leaves the
// channel open and silent. Commands on the same system still run.
func TestNoSFTPSubsystemFailsAtOnce(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{NoSFTP: true})
	p, _ := newPool(t, Config{OpenTimeout: time.Hour}) // a silent channel would outlast the test
	tg := target(t, srv, "nosftp", srv.Signer)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := p.SFTP(ctx, tg); !errors.Is(err, ErrNoSFTP) {
		t.Fatalf("shared SFTP: err = %v, want ErrNoSFTP", err)
	}
	if _, err := p.DedicatedSFTP(ctx, tg); !errors.Is(err, ErrNoSFTP) {
		t.Fatalf("dedicated SFTP: err = %v, want ErrNoSFTP", err)
	}
	if _, err := run(ctx, p, tg, "true"); err != nil {
		t.Fatalf("command on the same system: %v", err)
	}
	if n := testutil.ToFloat64(p.metrics.dials.WithLabelValues("ok")); n != 1 {
		t.Errorf("%v dials, want 1: a refused subsystem is no reason to drop the connection", n)
	}
}
