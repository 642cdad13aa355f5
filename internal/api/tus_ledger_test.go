package api

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// ledgerProbe is a store whose CreateUpload first notes what the temporary-name ledger holds.
type ledgerProbe struct {
	store.Store
	mu   sync.Mutex
	seen []store.TempFile // the ledger's records when the upload's record was made
	part string           // the part file the upload's record names
}

func (p *ledgerProbe) CreateUpload(ctx context.Context, params *store.CreateUploadParams) error {
	// Claiming with a clock an hour ahead sees every record; the claim leases them for that
	// hour, so no sweep removes the part file meanwhile, and the keeper forgets its records as
	// usual.
	later := time.Now().Add(time.Hour)
	recs, err := p.Store.ClaimTemps(ctx, later, later, 100)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.seen, p.part = recs, params.Upload.PartName
	p.mu.Unlock()
	return p.Store.CreateUpload(ctx, params)
}

// TestTusPartFileIsInTheLedgerUntilRecorded: between creating a resumable upload's part file
// and committing the upload's record, the part file's name is in the temporary-name ledger,
// so an instance killed in between leaves it to the sweep instead of orphaned; once the upload's
// record holds it, the ledger forgets it. Before, no record named the part file in between.
func TestTusPartFileIsInTheLedgerUntilRecorded(t *testing.T) {
	var probe *ledgerProbe
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) {
		probe = &ledgerProbe{Store: d.Store}
		d.Store = probe
	})
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	chownTree(t, dir, e.srv.User)
	tusCreate(t, e, "alice", "hpc", dir+"/big.bin", 1<<20)
	probe.mu.Lock()
	seen, part := probe.seen, probe.part
	probe.mu.Unlock()
	found := false
	for _, r := range seen {
		if r.Name == part && filepath.Clean(r.Dir) == dir {
			found = true
		}
	}
	if part == "" || !found {
		t.Fatalf("the ledger while the upload was recorded: %+v; want the part file %s in %s", seen, part, dir)
	}
	if err := e.api.Temps().flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if recs, err := e.api.deps.Store.ClaimTemps(t.Context(), time.Now().Add(3*time.Hour), time.Now(), 100); err != nil || len(recs) != 0 {
		t.Fatalf("the ledger after the upload was recorded: %+v %v; want nothing", recs, err)
	}
}
