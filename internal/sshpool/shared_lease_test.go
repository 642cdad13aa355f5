package sshpool

import (
	"testing"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestDedicatedTakesIdleShared: a dedicated lease takes the connection's shared SFTP channel
// while nobody borrows it (a listing's, say: no channel to open), in its slot, and gives it back
// as the shared channel when it ends; while the shared channel is borrowed, or once the next
// borrower has opened another, the lease gets a channel of its own as before.
func TestDedicatedTakesIdleShared(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	ctx := t.Context()
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "take", srv.Signer)

	s, err := p.SFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	shared := s.Client
	s.Done(nil)
	before := p.Stats()

	l, err := p.DedicatedSFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if l.Client != shared {
		t.Fatal("the lease opened a channel while the shared one was idle")
	}
	if _, err := l.Getwd(); err != nil {
		t.Fatalf("the taken channel: %v", err)
	}
	if st := p.Stats(); st.ChannelsInUse != before.ChannelsInUse || st.Conns != before.Conns {
		t.Fatalf("taking the shared channel: %d channels on %d connections, want %d on %d (the same slot)",
			st.ChannelsInUse, st.Conns, before.ChannelsInUse, before.Conns)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.ChannelsInUse != before.ChannelsInUse || st.IdleSFTP != 0 {
		t.Fatalf("after the lease: %d channels in use, %d idle; want %d and 0 (shared again)", st.ChannelsInUse, st.IdleSFTP, before.ChannelsInUse)
	}
	s, err = p.SFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if s.Client != shared {
		t.Fatal("the lease's end did not give the shared channel back")
	}

	// Borrowed: the lease opens its own.
	l, err = p.DedicatedSFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if l.Client == shared {
		t.Fatal("a lease took the shared channel while it was borrowed")
	}
	s.Done(nil)
	_ = l.Close()

	// Taken, and a borrower opened another meanwhile: the taken one is parked, not shared.
	l, err = p.DedicatedSFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if l.Client == shared {
		t.Fatal("a lease took the shared channel though an idle one was there")
	}
	m, err := p.DedicatedSFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if m.Client != shared {
		t.Fatal("the second lease did not take the idle shared channel")
	}
	s, err = p.SFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if s.Client == shared {
		t.Fatal("a borrower got the channel lent to a lease")
	}
	if _, err := s.Getwd(); err != nil {
		t.Fatal(err)
	}
	s.Done(nil)
	_ = m.Close()
	_ = l.Close()
	if st := p.Stats(); st.IdleSFTP != 2 {
		t.Fatalf("%d idle channels, want 2 (the taken one parked beside the other)", st.IdleSFTP)
	}
}

// TestDedicatedLeavesSharedOnFullConn: a connection with no room for another channel keeps its
// shared SFTP channel: a dedicated lease that took it would leave the next listing waiting for a
// slot. The lease gets a channel elsewhere.
func TestDedicatedLeavesSharedOnFullConn(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	ctx := t.Context()
	p, _ := newPool(t, Config{})
	tg := target(t, srv, "full", srv.Signer)
	tg.MaxSessions = 3 // one slot per connection: the shared channel's
	s, err := p.SFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	shared := s.Client
	s.Done(nil)
	l, err := p.DedicatedSFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Client == shared {
		t.Fatal("the lease took the shared channel of a connection with no room left")
	}
	s, err = p.SFTP(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Done(nil)
	if s.Client != shared {
		t.Fatal("the shared channel changed")
	}
}
