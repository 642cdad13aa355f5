package guard

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sshapi/sshapi/internal/pgtest"
)

// twoInstances returns two Guards on one fresh PostgreSQL database, as two sshapi instances
// have them, and an administrator's connection to it.
func twoInstances(t *testing.T, cfg Config) (a, b *Guard, admin *pgx.Conn) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	url := pgtest.New(t).NewDatabase(t)
	var gs [2]*Guard
	for i := range gs {
		pg, err := OpenPostgres(t.Context(), url, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Close)
		gs[i] = New(cfg, pg)
	}
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	return gs[0], gs[1], admin
}

// lockHolder is the backend pid of the one session holding an advisory lock.
func lockHolder(t *testing.T, admin *pgx.Conn) int {
	t.Helper()
	var pids []int
	rows, err := admin.Query(t.Context(), "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted")
	if err == nil {
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	if err != nil || len(pids) != 1 {
		t.Fatalf("sessions holding an advisory lock: %v, %v; want one", pids, err)
	}
	return pids[0]
}

// lostWithin waits for held to be cancelled, failing the test if it takes longer than bound
// (the bound is only how long we are willing to look), and checks it was for the lost guard.
func lostWithin(t *testing.T, what string, held context.Context, bound time.Duration) {
	t.Helper()
	select {
	case <-held.Done():
	case <-time.After(bound):
		t.Fatalf("%s: still running %v after its guard was lost", what, bound)
	}
	if cause := context.Cause(held); !errors.Is(cause, ErrLost) || !errors.Is(cause, ErrSessionEnded) {
		t.Fatalf("%s: canceled with %v, want ErrLost and ErrSessionEnded", what, cause)
	}
}

// TestPostgresLostLockStopsHolders: when the session holding instance A's shared advisory lock
// ends (here pg_terminate_backend, as a restart or a failover would), PostgreSQL gives the lock
// to instance B's waiting move; every holder on A relying on that lock is told to stop at once
// (its context canceled with ErrLost), new readers on A do not join the lost lock but queue
// behind B's move, and giving the lost holds back is clean.
func TestPostgresLostLockStopsHolders(t *testing.T) {
	a, b, admin := twoInstances(t, Config{Wait: 10 * time.Second})
	// Two walks on A share A's one advisory lock.
	walk1, rel1, err := a.Hold(t.Context(), "alice", "bob", false)
	if err != nil {
		t.Fatal(err)
	}
	defer rel1()
	walk2, rel2, err := a.Hold(t.Context(), "alice", "carol", false)
	if err != nil {
		t.Fatal(err)
	}
	defer rel2()
	pid := lockHolder(t, admin)
	// B's move waits for A's walks.
	type hold struct {
		held    context.Context
		release func()
		err     error
	}
	moved := make(chan hold, 1)
	go func() {
		h, rel, err := b.Hold(t.Context(), "alice", "dave", true)
		moved <- hold{h, rel, err}
	}()
	var waiting bool
	for !waiting { // until B's session waits for the lock
		if err := admin.QueryRow(t.Context(), "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case m := <-moved:
		t.Fatalf("B's move got the guard while A's walks hold it: %v", m.err)
	default:
	}
	var ok bool
	if err := admin.QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v, %v", pid, ok, err)
	}
	// PostgreSQL hands the lock to B: the walks on A must have been told to stop.
	m := <-moved
	if m.err != nil {
		t.Fatalf("B's move after A's session ended: %v", m.err)
	}
	lostWithin(t, "walk 1", walk1, 10*time.Second)
	lostWithin(t, "walk 2", walk2, 10*time.Second)
	if m.held.Err() != nil {
		t.Fatalf("B's move was canceled: %v", context.Cause(m.held))
	}
	// A new walk on A takes a lock of its own, which B's move holds back.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := a.Hold(ctx, "alice", "bob", false); !errors.Is(err, ErrBusy) {
		t.Fatalf("a new walk on A while B's move holds the guard: %v, want ErrBusy", err)
	}
	// The lost holds give their lock back (its session is gone) without trouble.
	rel1()
	rel2()
	newWalk := make(chan hold, 1)
	go func() {
		h, rel, err := a.Hold(t.Context(), "alice", "bob", false)
		newWalk <- hold{h, rel, err}
	}()
	m.release()
	if m.held.Err() == nil {
		t.Fatal("a released hold's context is not done")
	}
	w := <-newWalk
	if w.err != nil {
		t.Fatalf("a new walk on A after B's move: %v", w.err)
	}
	if w.held.Err() != nil {
		t.Fatalf("the new walk is canceled: %v", context.Cause(w.held))
	}
	w.release()
	_, again, err := b.Hold(t.Context(), "alice", "dave", true)
	if err != nil {
		t.Fatalf("a move once everything was released: %v", err)
	}
	again()
}

// TestPostgresSilentSessionIsLost: a session that stops answering without ending (its backend
// frozen here, as a partition looks from the client) is taken for lost after at most two
// RemotePing periods, and the exclusive holder relying on it is told to stop; once the backend
// runs again the lock is free for the other instance (the watcher closed that session).
func TestPostgresSilentSessionIsLost(t *testing.T) {
	a, b, admin := twoInstances(t, Config{Wait: 10 * time.Second, RemotePing: 200 * time.Millisecond})
	move, rel, err := a.Hold(t.Context(), "alice", "bob", true)
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	pid := lockHolder(t, admin)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("freezing backend %d: %v", pid, err)
	}
	frozen := true
	defer func() {
		if frozen {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	lostWithin(t, "the move", move, 10*time.Second)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen = false
	_, relB, err := b.Hold(t.Context(), "alice", "carol", true)
	if err != nil {
		t.Fatalf("B's move after A's frozen session was given up: %v", err)
	}
	relB()
	rel()
}

// TestGuardReleaseEndsHeld: a hold's context lives until its release, not longer, and without a
// Remote nothing else ends it.
func TestGuardReleaseEndsHeld(t *testing.T) {
	g := New(Config{}, nil)
	held, rel, err := g.Hold(t.Context(), "alice", "bob", false)
	if err != nil {
		t.Fatal(err)
	}
	if held.Err() != nil {
		t.Fatalf("held canceled before release: %v", context.Cause(held))
	}
	rel()
	if held.Err() == nil || errors.Is(context.Cause(held), ErrLost) {
		t.Fatalf("after release: %v", context.Cause(held))
	}
}
