package api

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/store"
)

// TestTusSweepNotStarvedByUnreachableSystem: a user whose expired uploads cannot be removed
// (their system does not answer) does not keep everyone else's from being swept. mallory has
// more expired uploads than one sweep takes (100), all older than alice's, on a system whose
// port is closed (the pool gives up on it after 1 s); alice's expired part file must go within
// two sweeps of 20 s each. Before, a failed removal gave its upload's lease back, so every
// sweep took mallory's same oldest uploads again and tried each (a pool deadline apiece: one
// sweep ran out of time on them) and never reached alice's.
func TestTusSweepNotStarvedByUnreachableSystem(t *testing.T) {
	e := newEnvConfig(t, Config{TusExpiry: time.Second}, func(_ string, d *Deps, _ **Server) {
		pool := sshpool.New(sshpool.Config{AcquireTimeout: time.Second}, d.Log, nil)
		_ = pool.Start(t.Context())
		t.Cleanup(func() { _ = pool.Stop(context.Background()) })
		d.Pool = pool
	})
	e.register("alice", "hpc")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	e.registerAt("mallory", "dead", e.srv, closed)
	ctx := t.Context()
	old := time.Now().Add(-time.Hour)
	for i := range 120 {
		u := &store.Upload{ID: fmt.Sprintf("m%03d", i), Owner: "mallory", SystemRef: "dead", SystemOwner: "mallory", SystemID: "dead",
			Path: "/tmp/m", Dest: "/tmp/m", PartName: ".m.sshapi-0123456789abcdef.part", Length: 1, HashState: []byte{},
			ExpiresAt: old.Add(time.Duration(i) * time.Millisecond)}
		if err := e.api.deps.Store.CreateUpload(ctx, &store.CreateUploadParams{Upload: u, Now: old}); err != nil {
			t.Fatal(err)
		}
	}
	dir := e.srv.MkTemp(t)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/a.bin", 10)
	awaitState(t, "alice's upload to expire", func() bool { return tusDo(t, e, e.url, "alice", "HEAD", loc, nil).status == 410 })
	sw := e.api.UploadSweeper(time.Minute)
	for range 2 {
		// Canceled after 20 s rather than given a deadline: the pool's own (1 s) applies to
		// callers without one.
		sctx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(20*time.Second, cancel)
		n, err := sw.Sweep(sctx) // mallory's removals fail: their errors are expected
		timer.Stop()
		cancel()
		t.Logf("a sweep removed %d (%.120v)", n, err)
	}
	if names := onlyFiles(t, dir); len(names) != 0 {
		t.Fatalf("after two sweeps alice's expired part file is still there: %v", names)
	}
	if _, err := e.api.deps.Store.GetUpload(ctx, "alice", strings.TrimPrefix(loc, "/v1/systems/hpc/uploads/")); err == nil {
		t.Fatal("alice's expired upload is still recorded")
	}
}
