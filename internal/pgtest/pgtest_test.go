package pgtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func exec1(t *testing.T, ctx context.Context, url, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, ctx context.Context, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// TestRestart checks that a restarted cluster keeps its port and its committed rows, and that
// Stop may be called twice.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	c := New(t)
	url := c.NewDatabase(t)
	exec1(t, ctx, url, "CREATE TABLE t (n int)")
	exec1(t, ctx, url, "INSERT INTO t VALUES (1), (2)")
	port := c.Port
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port != port || !c.Running() {
		t.Fatalf("port %d → %d, running %v", port, c.Port, c.Running())
	}
	if n := count(t, ctx, url); n != 2 {
		t.Fatalf("%d rows after the restart, want 2", n)
	}
	c.Halt()
	if c.Running() {
		t.Fatal("running after Halt")
	}
	c.Stop()
	c.Stop()
}

// TestFailover seeds a replica, fails over to it (primary halted, replica promoted) and
// rejoins the old primary as the new primary's replica, while a pgxpool with a multi-host URL
// and target_session_attrs=read-write (what the service is given) keeps writing: it must reach
// whichever server is the primary, lose no committed row and never write to a standby.
func TestFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := StartWith(ctx, Options{Durable: true, Settings: []string{"wal_keep_size=64MB"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	if _, err := a.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	exec1(t, ctx, a.URL("app"), "CREATE TABLE t (n int)")
	b, err := a.NewReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if rec, err := b.InRecovery(ctx); err != nil || !rec {
		t.Fatalf("replica in recovery: %v %v", rec, err)
	}
	multi := fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/app?sslmode=disable&target_session_attrs=read-write", Account, a.Port, b.Port)
	pool, err := pgxpool.New(ctx, multi)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	acked := 0
	insert := func() error {
		_, err := pool.Exec(ctx, "INSERT INTO t VALUES ($1)", acked+1)
		if err == nil {
			acked++
		}
		return err
	}
	// insertSoon retries an insert until it succeeds (the pool's connections to a halted server
	// fail once each, then it dials the new primary).
	insertSoon := func() {
		t.Helper()
		var err error
		for i := 0; i < 100; i++ {
			if err = insert(); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no insert went through: %v", err)
	}
	for i := 0; i < 50; i++ {
		insertSoon()
	}
	if err := WaitReplayed(ctx, a, b); err != nil {
		t.Fatal(err)
	}
	if n := count(t, ctx, b.URL("app")); n != acked {
		t.Fatalf("replica has %d rows, primary acknowledged %d", n, acked)
	}

	a.Halt()
	if err := insert(); err == nil {
		t.Fatal("an insert went through with the primary halted and the replica not promoted")
	} else if strings.Contains(err.Error(), "read-only") {
		t.Fatalf("write reached the standby: %v", err)
	}
	if err := b.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		insertSoon()
	}
	if n := count(t, ctx, b.URL("app")); n != acked {
		t.Fatalf("new primary has %d rows, %d acknowledged", n, acked)
	}

	// The old primary rejoins as a replica on its port, first in the URL: still no write there.
	if err := a.Reseed(ctx, b); err != nil {
		t.Fatal(err)
	}
	if rec, err := a.InRecovery(ctx); err != nil || !rec {
		t.Fatalf("reseeded old primary in recovery: %v %v", rec, err)
	}
	pool.Reset() // new connections: each must pass the standby by
	for i := 0; i < 20; i++ {
		insertSoon()
	}
	if err := WaitReplayed(ctx, b, a); err != nil {
		t.Fatal(err)
	}
	if n := count(t, ctx, a.URL("app")); n != acked {
		t.Fatalf("rejoined replica has %d rows, %d acknowledged", n, acked)
	}
}
