package sshpool

import (
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestIdleDataChannels: a dedicated SFTP channel whose lease ends is kept for the next lease of
// the key (the same channel, working), up to sftp_idle_per_conn; a command that needs its slot
// closes it; one idle past sftp_idle_timeout is closed; one whose channel ended is not lent.
func TestIdleDataChannels(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	ctx := t.Context()

	t.Run("reused", func(t *testing.T) {
		p, _ := newPool(t, Config{SFTPIdlePerConn: 1})
		tg := target(t, srv, "reuse", srv.Signer)
		a, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		_ = a.Close()
		_ = b.Close()
		if n := p.Stats().IdleSFTP; n != 1 {
			t.Fatalf("%d idle channels after two leases ended, want sftp_idle_per_conn 1", n)
		}
		c, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Client != a.Client {
			t.Fatal("the next lease did not get the idle channel")
		}
		if _, err := c.Getwd(); err != nil {
			t.Fatalf("reused channel: %v", err)
		}
		if n := p.Stats().IdleSFTP; n != 0 {
			t.Fatalf("%d idle channels while the only one is lent", n)
		}
	})

	t.Run("command reclaims the slot", func(t *testing.T) {
		p, _ := newPool(t, Config{MaxConnsPerKey: 1})
		tg := target(t, srv, "reclaim", srv.Signer)
		tg.MaxSessions = 3 // one slot per connection
		l, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
		if n := p.Stats().IdleSFTP; n != 1 {
			t.Fatalf("%d idle channels, want 1", n)
		}
		if out, err := run(ctx, p, tg, "echo ok"); err != nil || out != "ok\n" {
			t.Fatalf("command on a connection whose only slot was idle: %q, %v", out, err)
		}
		if n := p.Stats().IdleSFTP; n != 0 {
			t.Fatalf("%d idle channels after the command took the slot", n)
		}
	})

	t.Run("timeout and closed channels", func(t *testing.T) {
		p, _ := newPool(t, Config{SFTPIdleTimeout: time.Minute})
		tg := target(t, srv, "expire", srv.Signer)
		l, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
		p.evictIdle(time.Now().Add(2 * time.Minute))
		if n := p.Stats().IdleSFTP; n != 0 {
			t.Fatalf("%d idle channels after the idle timeout", n)
		}
		_ = l.Client.Wait() // returns only once the expired channel is closed

		l, err = p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
		_ = l.Client.Close() // the channel ends while idle
		waitFor(t, "the ended channel to leave the idle list", func() bool { return p.Stats().IdleSFTP == 0 })
		m, err := p.DedicatedSFTP(ctx, tg)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if m.Client == l.Client {
			t.Fatal("an ended channel was lent again")
		}
		if _, err := m.Getwd(); err != nil {
			t.Fatal(err)
		}
	})
}
