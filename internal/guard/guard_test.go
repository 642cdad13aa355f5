package guard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/pgtest"
)

// held reports whether a Hold finishes (true) or is still waiting when wait passes: the wait is
// only how long we are willing to look, the assertion is about which holds can coexist.
func holdAsync(g *Guard, key string, exclusive bool) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, rel, err := g.Hold(context.Background(), key, "bob", exclusive)
		if err == nil {
			defer rel()
		}
		ch <- err
	}()
	return ch
}

func mustHold(t *testing.T, g *Guard, key string, exclusive bool) func() {
	t.Helper()
	_, rel, err := g.Hold(context.Background(), key, "bob", exclusive)
	if err != nil {
		t.Fatalf("Hold(%q, exclusive=%v): %v", key, exclusive, err)
	}
	t.Cleanup(rel) // a test that fails half-way leaves nothing held (releasing twice is a no-op)
	return rel
}

// guards returns, for each case, two Guards that must exclude each other: the same Guard twice
// (one instance), and two Guards on one PostgreSQL database (two instances).
func guards(t *testing.T) map[string][2]*Guard {
	t.Helper()
	cfg := Config{Wait: 300 * time.Millisecond}
	local := New(cfg, nil)
	out := map[string][2]*Guard{"local": {local, local}}
	if testing.Short() {
		return out
	}
	url := pgtest.New(t).NewDatabase(t)
	var gs [2]*Guard
	for i := range gs {
		pg, err := OpenPostgres(context.Background(), url, Config{RemoteConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Close)
		gs[i] = New(cfg, pg)
	}
	out["postgres"] = gs
	return out
}

func TestGuardExclusion(t *testing.T) {
	for name, gs := range guards(t) {
		a, b := gs[0], gs[1]
		t.Run(name, func(t *testing.T) {
			// Shared holders coexist, on one instance and across instances.
			r1 := mustHold(t, a, "alice", false)
			r2 := mustHold(t, b, "alice", false)
			// An exclusive hold waits for them and gives up with ErrBusy after Wait.
			if err := <-holdAsync(b, "alice", true); !errors.Is(err, ErrBusy) {
				t.Fatalf("exclusive while shared held: %v, want ErrBusy", err)
			}
			// Another key is independent.
			mustHold(t, b, "bob", true)()
			r1()
			r2()
			// Exclusive excludes shared and exclusive, on the other instance too.
			w := mustHold(t, a, "alice", true)
			if err := <-holdAsync(b, "alice", false); !errors.Is(err, ErrBusy) {
				t.Fatalf("shared while exclusive held: %v, want ErrBusy", err)
			}
			if err := <-holdAsync(b, "alice", true); !errors.Is(err, ErrBusy) {
				t.Fatalf("exclusive while exclusive held: %v, want ErrBusy", err)
			}
			// Released, the key is free again everywhere.
			w()
			mustHold(t, b, "alice", true)()
			mustHold(t, a, "alice", false)()
		})
	}
}

// TestGuardWaitsThenGets: a waiting hold is granted as soon as the holder releases, without
// waiting out its bound.
func TestGuardWaitsThenGets(t *testing.T) {
	for name, gs := range guards(t) {
		a, b := gs[0], gs[1]
		t.Run(name, func(t *testing.T) {
			r := mustHold(t, a, "alice", false)
			done := holdAsync(b, "alice", true)
			select {
			case err := <-done:
				t.Fatalf("exclusive granted while shared held: %v", err)
			default:
			}
			r()
			if err := <-done; err != nil {
				t.Fatalf("exclusive after release: %v", err)
			}
		})
	}
}

// TestGuardWriterPreference: once an exclusive holder waits, a new shared holder queues behind
// it, so reads cannot starve a move; when the writer gives up, readers go on.
func TestGuardWriterPreference(t *testing.T) {
	g := New(Config{Wait: 2 * time.Second}, nil)
	r := mustHold(t, g, "alice", false)
	writer := holdAsync(g, "alice", true)
	// Wait until the writer is queued.
	for {
		g.mu.Lock()
		queued := g.keys["alice"] != nil && g.keys["alice"].writersWaiting == 1
		g.mu.Unlock()
		if queued {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := g.Hold(ctx, "alice", "bob", false); err == nil {
		t.Fatal("a new reader passed a waiting writer")
	}
	r()
	if err := <-writer; err != nil {
		t.Fatalf("writer: %v", err)
	}
	mustHold(t, g, "alice", false)()
	g.mu.Lock()
	n := len(g.keys)
	g.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d keys remembered after every hold ended", n)
	}
}

// TestGuardCanceled: a caller that goes away stops waiting with its own error, not ErrBusy.
func TestGuardCanceled(t *testing.T) {
	g := New(Config{Wait: 5 * time.Second}, nil)
	w := mustHold(t, g, "alice", true)
	defer w()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, _, err := g.Hold(ctx, "alice", "bob", false); errc <- err }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled wait: %v, want context.Canceled", err)
	}
}

// BenchmarkHold: one shared hold and release, uncontended, on one instance and on PostgreSQL
// (sequential, so every hold is the instance's first and takes the advisory lock; and 16 at
// once, where holds join the instance's advisory lock):
//
//	go test -run '^$' -bench Hold ./internal/guard/
func BenchmarkHold(b *testing.B) {
	local := New(Config{}, nil)
	b.Run("local", func(b *testing.B) {
		for b.Loop() {
			_, rel, err := local.Hold(context.Background(), "alice", "bob", false)
			if err != nil {
				b.Fatal(err)
			}
			rel()
		}
	})
	url := pgtest.New(b).NewDatabase(b)
	pg, err := OpenPostgres(context.Background(), url, Config{RemoteConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pg.Close)
	g := New(Config{}, pg)
	b.Run("postgres-sequential", func(b *testing.B) {
		for b.Loop() {
			_, rel, err := g.Hold(context.Background(), "alice", "bob", false)
			if err != nil {
				b.Fatal(err)
			}
			rel()
		}
	})
	b.Run("postgres-16-at-once", func(b *testing.B) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, rel, err := g.Hold(context.Background(), "alice", "bob", false)
				if err != nil {
					b.Error(err)
					return
				}
				time.Sleep(time.Millisecond) // a request's work while it holds
				rel()
			}
		})
	})
}

// waitQueued waits until key has n exclusive holders waiting.
func waitQueued(g *Guard, key string, n int) {
	for {
		g.mu.Lock()
		e := g.keys[key]
		q := 0
		if e != nil {
			for _, c := range e.waiting {
				q += c
			}
		}
		g.mu.Unlock()
		if q == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGuardPreferenceEnds: a writer waiting behind a long read holds new readers back only for
// Config.Prefer; then they go on, and the writer still gets the key when the reads end.
func TestGuardPreferenceEnds(t *testing.T) {
	g := New(Config{Wait: 3 * time.Second, Prefer: 50 * time.Millisecond}, nil)
	long := mustHold(t, g, "alice", false) // a stalled download, say
	writer := holdAsync(g, "alice", true)
	waitQueued(g, "alice", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, r, err := g.Hold(ctx, "alice", "carol", false)
	if err != nil {
		t.Fatalf("a reader stayed held back past the writer's preference: %v", err)
	}
	select {
	case err := <-writer:
		t.Fatalf("writer got the key while reads were held: %v", err)
	default:
	}
	r()
	long()
	if err := <-writer; err != nil {
		t.Fatalf("writer after the reads ended: %v", err)
	}
}

// TestGuardWaitersPerPrincipal: one principal cannot queue more than its share of moves; others
// still can.
func TestGuardWaitersPerPrincipal(t *testing.T) {
	g := New(Config{Wait: 2 * time.Second, WaitersPerPrincipal: 2}, nil)
	r := mustHold(t, g, "alice", false)
	w1, w2 := holdAsync(g, "alice", true), holdAsync(g, "alice", true)
	waitQueued(g, "alice", 2)
	start := time.Now()
	if _, _, err := g.Hold(context.Background(), "alice", "bob", true); !errors.Is(err, ErrBusy) || time.Since(start) > time.Second {
		t.Fatalf("bob's third waiting move: %v after %v, want ErrBusy at once", err, time.Since(start))
	}
	carol := make(chan error, 1)
	go func() {
		_, rel, err := g.Hold(context.Background(), "alice", "carol", true)
		if err == nil {
			rel()
		}
		carol <- err
	}()
	waitQueued(g, "alice", 3)
	r()
	for _, c := range []<-chan error{w1, w2, carol} {
		if err := <-c; err != nil {
			t.Fatalf("waiting move after the read ended: %v", err)
		}
	}
}

// TestPostgresCloseWithLockHeld: closing a Postgres whose lock was never given back ends that
// session (the lock goes with it) instead of waiting forever for the connection.
func TestPostgresCloseWithLockHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	url := pgtest.New(t).NewDatabase(t)
	a, err := OpenPostgres(t.Context(), url, Config{RemoteConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, unlock, err := a.Lock(t.Context(), "alice", true)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for a lock that was never given back")
	}
	unlock() // after Close: a no-op, not a panic
	b, err := OpenPostgres(t.Context(), url, Config{RemoteConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, unlockB, err := b.Lock(ctx, "alice", true)
	if err != nil {
		t.Fatalf("the lock outlived the closed session: %v", err)
	}
	unlockB()
}
