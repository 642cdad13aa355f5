package api

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/pgtest"
)

// TestGrantArchiveLostGuard is attack 1 across two instances whose guard is on PostgreSQL, with
// the database session holding instance A's lock ending mid-walk (pg_terminate_backend, as a
// restart or failover would). bob's archive download of share/t on A stalls in t/aaa; the
// session ends, so PostgreSQL lets instance B's move have the guard, and B swaps t/zzz for
// alice's link to her home. A's walk must have been stopped: bob's archive ends truncated,
// without t/zzz and without anything from outside the grant.
func TestGrantArchiveLostGuard(t *testing.T) {
	url := pgtest.New(t).NewDatabase(t)
	cfg := guard.Config{Wait: 10 * time.Second}
	var gs [2]*guard.Guard
	for i := range gs {
		pg, err := guard.OpenPostgres(t.Context(), url, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Close)
		gs[i] = guard.New(cfg, pg)
	}
	a, b := gs[0], gs[1]
	f := newRaceFixtureGuard(t, a)
	top := filepath.Join(f.share, "t")
	mustMkdir(t, filepath.Join(top, "zzz"))
	mustWrite(t, filepath.Join(top, "zzz", "inside.txt"), "inside")
	mustWrite(t, filepath.Join(top, "aaa"), strings.Repeat("a", 32<<20))
	ownTree(t, f.srv, top)
	f.resetLinks(t)

	// A probe sharing A's advisory lock with bob's walk: the test's way to see A learn the loss.
	probe, releaseProbe, err := a.Hold(t.Context(), "alice", "probe", false)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseProbe()
	req, _ := http.NewRequest("GET", f.e.url+f.url("content", top)+"?archive=tar", nil)
	req.Header.Set("Authorization", "Bearer "+f.e.token("bob"))
	res, head := archiveHead(t, req, 256<<10)

	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var pids []int
	rows, err := admin.Query(t.Context(), "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted")
	if err == nil {
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	if err != nil || len(pids) != 1 {
		t.Fatalf("sessions holding an advisory lock: %v, %v; want A's one", pids, err)
	}
	if _, err := admin.Exec(t.Context(), "SELECT pg_terminate_backend($1)", pids[0]); err != nil {
		t.Fatal(err)
	}
	// Instance B's move gets the guard once A's session is gone, and restructures.
	_, move, err := b.Hold(t.Context(), "alice", "carol", true)
	if err != nil {
		t.Fatalf("B's move: %v", err)
	}
	select {
	case <-probe.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("A did not notice its lock was lost")
	}
	if !errors.Is(context.Cause(probe), guard.ErrLost) {
		t.Fatalf("A's probe ended with %v, want ErrLost", context.Cause(probe))
	}
	zzz := filepath.Join(top, "zzz")
	if err := os.Rename(zzz, zzz+".gone"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(f.share, "stage", "up"), zzz); err != nil {
		t.Fatal(err)
	}
	move()

	rest, _ := io.ReadAll(res.Body) // the server may cut the connection: what came is judged
	all := append(head, rest...)
	if bytes.Contains(all, []byte(secretMark)) || bytes.Contains(all, []byte(victimMark)) {
		t.Fatal("A's walk went on after its guard was lost and archived files from outside the grant")
	}
	tr := tar.NewReader(bytes.NewReader(all))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("the archive is complete (%v): A's walk was not stopped", names)
		}
		if err != nil {
			break // truncated, as a stopped walk leaves it
		}
		names = append(names, h.Name)
	}
	for _, n := range names {
		if strings.Contains(n, "zzz") {
			t.Fatalf("the stopped walk still reached %s", n)
		}
	}
	f.intact(t)
}
