package transfer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// gatedAppends is the real database, except that the plan chunk number gate (counting from 0)
// waits until release is closed (or its context ends), after reporting on reached that it
// waits. final, when set, gates the chunk that completes the plan instead.
type gatedAppends struct {
	Persistence
	gate    int
	final   bool
	reached chan struct{}
	release chan struct{}

	mu sync.Mutex
	n  int
}

func newGatedAppends(gate int, final bool) *gatedAppends {
	return &gatedAppends{gate: gate, final: final, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gatedAppends) ItemsAppend(ctx context.Context, p *ItemsAppendParams) error {
	g.mu.Lock()
	k := g.n
	g.n++
	g.mu.Unlock()
	if (g.final && p.Final) || (!g.final && k == g.gate) {
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Persistence.ItemsAppend(ctx, p)
}

// smallTree writes n small files of distinct content under a new directory of a, half of them
// in a subdirectory, and returns the directory.
func smallTree(t *testing.T, a *sshtest.Server, n int) string {
	t.Helper()
	root := filepath.Join(a.MkTemp(t), "tree")
	sub := filepath.Join(root, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	owned(t, a, root, sub)
	for i := range n {
		dir := root
		if i%2 == 1 {
			dir = sub
		}
		p := filepath.Join(dir, fmt.Sprintf("f-%04d", i))
		if err := os.WriteFile(p, bytes.Repeat([]byte(p), 1+i%7), 0o644); err != nil {
			t.Fatal(err)
		}
		owned(t, a, p)
	}
	return root
}

// sameFiles fails t unless every regular file under src has a copy with the same content under
// dst, except those in keep, whose copies must hold keep's content; dst holds nothing else
// (no temporary files).
func sameFiles(t *testing.T, src, dst string, keep map[string][]byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		got, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		want, ok := keep[filepath.Join(dst, rel)]
		if !ok {
			if want, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: got %q, want %q", rel, got, want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := 0
	_ = filepath.WalkDir(dst, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			m++
		}
		return nil
	})
	if m != n {
		t.Fatalf("destination holds %d files, the source %d", m, n)
	}
}

// streamConfig plans (and copies) 4×16 = 64 items per chunk.
func streamConfig() Config {
	cfg := testConfig()
	cfg.BatchFiles = 4
	return cfg
}

// copyWithHeldChunk starts a copy of a 300-file tree from system a to system b with g holding
// back one chunk of its plan, and returns once that chunk is reached and 32 files are done.
func copyWithHeldChunk(t *testing.T, g *gatedAppends) (*harness, *gatedAppends, *sshtest.Server, string, string, *Transfer) {
	t.Helper()
	h := newHarness(t, streamConfig())
	h.stop()
	h.wrap = func(p Persistence) Persistence { g.Persistence = p; return g }
	h.start()
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	root := smallTree(t, a, 300)
	dst := filepath.Join(b.MkTemp(t), "copy")
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
		Destination: Endpoint{System: "b", Path: dst}, Recursive: true})
	select {
	case <-g.reached:
	case <-time.After(time.Minute):
		t.Fatal("the held chunk of the plan was never reached")
	}
	h.wait("alice", tr.ID, time.Minute, func(tr *Transfer) bool { return tr.FilesDone >= 32 })
	return h, g, a, root, dst, tr
}

// TestPlanOverlapsCopy: a directory's first chunks are copied while its walk is still going:
// files are done while the chunk that completes the plan is held back, and the transfer then
// finishes with every file copied once. Planning the whole tree before copying never gets files
// done while the last chunk waits.
func TestPlanOverlapsCopy(t *testing.T) {
	h, g, _, root, dst, tr := copyWithHeldChunk(t, newGatedAppends(0, true))
	close(g.release)
	got := h.wait("alice", tr.ID, time.Minute, nil)
	if got.Status != StatusSucceeded || got.FilesTotal != 300 || got.FilesDone != 300 {
		t.Fatalf("transfer: %+v", got)
	}
	sameFiles(t, root, dst, nil)
}

// TestResumeMidPlanCopiesEachFileOnce: sshapi stops while a directory's walk is half stored
// (chunks stored, some of their files copied, the rest of the tree not reached) and a file is
// added to the source meanwhile. The next run keeps what was stored and done — a file copied
// before is not copied again (its copy, overwritten with a marker meanwhile, keeps the marker)
// — and adds what the first walk had not stored, so every file is planned and copied once.
// Re-planning from scratch copies the done files again; resuming without walking again leaves
// the rest out.
func TestResumeMidPlanCopiesEachFileOnce(t *testing.T) {
	h, _, a, root, dst, tr := copyWithHeldChunk(t, newGatedAppends(2, false))
	h.stop() // the gated chunk is never stored

	// What the interrupted run left: part of the plan, some of it done.
	p, err := OpenSQLite(t.Context(), h.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.TransferGet(t.Context(), &TransferGetParams{ID: tr.ID})
	if err != nil {
		t.Fatal(err)
	}
	items, err := p.ItemsList(t.Context(), &ItemsListParams{ID: tr.ID, After: -1})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if st.planned || len(items) == 0 || len(items) >= 300 {
		t.Fatalf("after the stop: planned %v with %d items stored, want a partial plan", st.planned, len(items))
	}
	keep := map[string][]byte{}
	for _, it := range items {
		if it.Kind == KindFile && it.Status == ItemDone {
			keep[it.Destination] = []byte("copied by the first run")
			if err := os.WriteFile(it.Destination, keep[it.Destination], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(keep) == 0 {
		t.Fatal("the first run copied nothing")
	}
	added := filepath.Join(root, "sub", "added-later")
	if err := os.WriteFile(added, []byte("added while sshapi was down"), 0o644); err != nil {
		t.Fatal(err)
	}
	owned(t, a, added)

	h.wrap = nil
	h.start()
	got := h.wait("alice", tr.ID, time.Minute, nil)
	if got.Status != StatusSucceeded || got.FilesTotal != 301 || got.FilesDone != 301 {
		t.Fatalf("resumed transfer: %+v", got)
	}
	sameFiles(t, root, dst, keep)
	all, err := h.eng.Items(t.Context(), "alice", tr.ID, -1, 10000, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, it := range all {
		if seen[it.Source] {
			t.Fatalf("%s planned twice", it.Source)
		}
		seen[it.Source] = true
	}
	if len(all) != 303 { // the tree, sub and 301 files
		t.Fatalf("%d items, want 303", len(all))
	}
}

// txSizes is the real database, noting the most items one ItemsAppend or ItemsStage call (one
// transaction each) was given.
type txSizes struct {
	Persistence
	mu                sync.Mutex
	maxAppend, maxStg int
}

func (s *txSizes) ItemsAppend(ctx context.Context, p *ItemsAppendParams) error {
	s.mu.Lock()
	s.maxAppend = max(s.maxAppend, len(p.Items))
	s.mu.Unlock()
	return s.Persistence.ItemsAppend(ctx, p)
}

func (s *txSizes) ItemsStage(ctx context.Context, p *ItemsSaveParams) error {
	s.mu.Lock()
	s.maxStg = max(s.maxStg, len(p.Items))
	s.mu.Unlock()
	return s.Persistence.ItemsStage(ctx, p)
}

// TestLargeChunksShortTransactions: the walk's chunks and tar batches grow to 4 × the first
// (TestTarBatchesGrow), but the plan is stored and staged at most a first chunk's items per
// transaction, so no transaction holds SQLite's one connection longer than before and the
// heartbeat is not starved; every file is copied once.
func TestLargeChunksShortTransactions(t *testing.T) {
	h := newHarness(t, streamConfig())
	h.stop()
	sizes := &txSizes{}
	h.wrap = func(p Persistence) Persistence { sizes.Persistence = p; return sizes }
	h.start()
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	root := smallTree(t, a, 1000)
	dst := filepath.Join(b.MkTemp(t), "copy")
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
		Destination: Endpoint{System: "b", Path: dst}, Recursive: true})
	if got := h.wait("alice", tr.ID, 2*time.Minute, nil); got.Status != StatusSucceeded || got.FilesDone != 1000 {
		t.Fatalf("transfer: %+v", got)
	}
	sameFiles(t, root, dst, nil)
	sizes.mu.Lock()
	defer sizes.mu.Unlock()
	if first := 16 * 4; sizes.maxAppend > first || sizes.maxStg > first {
		t.Errorf("transactions of up to %d appended and %d staged items, want at most %d", sizes.maxAppend, sizes.maxStg, first)
	}
}
