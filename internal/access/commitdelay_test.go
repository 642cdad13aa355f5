package access

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// batchLog is the real store, with the size of each audit batch it committed noted.
type batchLog struct {
	store.Store
	mu      sync.Mutex
	batches []int
}

func (b *batchLog) AppendAuditBatch(ctx context.Context, p *store.AuditAppendParams) error {
	err := b.Store.AppendAuditBatch(ctx, p)
	b.mu.Lock()
	b.batches = append(b.batches, len(p.Entries))
	b.mu.Unlock()
	return err
}

func (b *batchLog) take() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.batches
	b.batches = nil
	return out
}

// TestAuditCommitDelay: while other audited requests are running, the batch writer holds an
// entry until theirs arrive and commits them together; a lone request's entry is committed at
// once. The delay is an hour, so a writer that waited when it should not would hang the test,
// and one that did not wait (each entry committed as it arrived) shows up as split batches.
func TestAuditCommitDelay(t *testing.T) {
	ctx := t.Context()
	s := &batchLog{Store: newStore(t)}
	r := New(Config{AuditCommitDelay: time.Hour}, Deps{Store: s})
	r.Start(ctx)
	defer r.Stop()
	entry := func(i int) store.AuditEntry {
		return store.AuditEntry{Owner: "alice", Action: fmt.Sprintf("a%d", i), Time: time.Now()}
	}

	// A lone request: committed without waiting for anyone.
	r.AuditStarted()
	if err := r.Record(ctx, entry(0)); err != nil {
		t.Fatal(err)
	}
	r.AuditEnded()
	if got := s.take(); !slices.Equal(got, []int{1}) {
		t.Fatalf("lone entry committed in batches %v, want [1]", got)
	}

	// Three requests running: the first entry waits for the other two, round after round.
	const rounds, running = 10, 3
	for round := range rounds {
		for range running {
			r.AuditStarted()
		}
		var wg sync.WaitGroup
		errs := make(chan error, running)
		for i := range running {
			wg.Go(func() { errs <- r.Record(ctx, entry(round*running+i)) })
			runtime.Gosched() // let the writer take this entry before the next is sent
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for range running {
			r.AuditEnded()
		}
		if got := s.take(); !slices.Equal(got, []int{running}) {
			t.Fatalf("round %d: %d concurrent entries committed in batches %v, want one of %d", round, running, got, running)
		}
	}
	if n := r.auditing.Load(); n != 0 {
		t.Fatalf("%d audited requests still counted", n)
	}
}
