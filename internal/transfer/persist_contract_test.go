package transfer

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/storage"
)

// sqliteOpener opens a fresh SQLite Persistence per call.
func sqliteOpener(t testing.TB) Persistence {
	p, err := OpenSQLite(t.Context(), filepath.Join(t.TempDir(), "transfers.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestPersistenceContract runs one contract suite on SQLite and on PostgreSQL.
func TestPersistenceContract(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, p Persistence)
	}{
		{"insert, get, list, duplicate key", contractInsert},
		{"lease acquire, heartbeat, owner limit", contractLease},
		{"reap once with concurrent reapers", contractReap},
		{"cancel, finish keeps canceled", contractCancel},
		{"retrying carries error, retries and next attempt", contractRetrying},
		{"slow runs counted in the row, by the lease holder only", contractSlowRuns},
		{"plan, items, ranges", contractItems},
		{"plan stored chunk by chunk", contractAppend},
		{"count-then-insert is serialised per owner", contractQuotaRace},
		{"object uploads, parts, hash state, stale uploads", contractUploads},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			open := sqliteOpener
			if name == "postgres" {
				open = pgOpener(t) // one cluster, a fresh database per case
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, open(t)) })
			}
		})
	}
}

// pgOpener starts one cluster for t and opens a fresh database per call.
func pgOpener(t *testing.T) func(t testing.TB) Persistence {
	cluster := pgtest.New(t)
	return func(t testing.TB) Persistence {
		p, err := OpenPostgres(t.Context(), cluster.NewDatabase(t), 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
}

// insertQueued adds a queued transfer of owner with an optional idempotency key.
func insertQueued(t testing.TB, p Persistence, id, owner, key string) (*Transfer, error) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	req := Request{Source: Endpoint{System: "a", Path: "/src"}, Destination: Endpoint{System: "b", Path: "/dst"}, IdempotencyKey: key}
	deadline, err := req.normalize(now)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Transfer{ID: id, Owner: owner, Status: StatusQueued, Source: req.Source, Destination: req.Destination,
		Sync: req.Sync, Verify: req.Verify, ChunkSize: req.ChunkSize, IdempotencyKey: key, CreatedAt: now, Deadline: deadline}
	tx, err := p.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if err := p.TransferInsert(t.Context(), tx, &TransferInsertParams{Transfer: tr, Request: req}); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return tr, nil
}

func mustInsert(t testing.TB, p Persistence, id, owner, key string) *Transfer {
	t.Helper()
	tr, err := insertQueued(t, p, id, owner, key)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func contractInsert(t *testing.T, p Persistence) {
	ctx := t.Context()
	want := mustInsert(t, p, "tr-1", "alice", "k1")
	mustInsert(t, p, "tr-2", "alice", "")
	mustInsert(t, p, "tr-3", "bob", "k1") // keys are per owner
	if _, err := insertQueued(t, p, "tr-4", "alice", "k1"); !errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("second insert with alice's key: err = %v, want ErrDuplicateKey", err)
	}
	got, err := p.TransferGet(ctx, &TransferGetParams{Owner: "alice", ID: "tr-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != want.ID || got.Status != StatusQueued || !got.CreatedAt.Equal(want.CreatedAt) || got.ChunkSize != want.ChunkSize ||
		got.IdempotencyKey != "k1" || got.Source != want.Source || got.Verify != VerifySHA256 {
		t.Fatalf("get: %+v, want %+v", got, want)
	}
	if _, err := p.TransferGet(ctx, &TransferGetParams{Owner: "bob", ID: "tr-1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob reads alice's transfer: err = %v", err)
	}
	byKey, req, err := p.TransferGetByKey(ctx, &TransferGetByKeyParams{Owner: "alice", Key: "k1"})
	if err != nil || byKey.ID != "tr-1" || req.Destination.Path != "/dst" || req.IdempotencyKey != "k1" {
		t.Fatalf("by key: %+v %+v %v", byKey, req, err)
	}
	list, err := p.TransferList(ctx, &TransferListParams{Owner: "alice", Limit: 10})
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	tx, _ := p.DB().BeginTx(ctx, nil)
	n, err := p.TransferCountUnfinished(ctx, tx, &TransferOwnerParams{Owner: "alice"})
	_ = tx.Rollback()
	if err != nil || n != 2 {
		t.Fatalf("unfinished: %d %v", n, err)
	}
}

func contractLease(t *testing.T, p Persistence) {
	ctx := t.Context()
	mustInsert(t, p, "tr-1", "alice", "")
	mustInsert(t, p, "tr-2", "alice", "")
	now := time.Now()
	acquire := func(id, runner string, at time.Time) LeaseResult {
		t.Helper()
		res, err := p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: id, Runner: runner, Now: at, Until: at.Add(time.Minute), MaxRunningPerOwner: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if r := acquire("tr-1", "i-a", now); r != LeaseAcquired {
		t.Fatalf("first acquire: %v", r)
	}
	if r := acquire("tr-1", "i-b", now); r != LeaseTaken {
		t.Fatalf("acquire of a live lease by another runner: %v", r)
	}
	if r := acquire("tr-2", "i-b", now); r != LeaseOwnerBusy {
		t.Fatalf("alice's second transfer with her limit 1 running: %v", r)
	}
	st, held, err := p.LeaseHeartbeat(ctx, &LeaseHeartbeatParams{ID: "tr-1", Runner: "i-a", Until: now.Add(time.Minute),
		Progress: progress{bytesTotal: 100, bytesDone: 40, streams: 2}})
	if err != nil || st != StatusRunning || !held {
		t.Fatalf("heartbeat: %v %v %v", st, held, err)
	}
	if _, held, _ := p.LeaseHeartbeat(ctx, &LeaseHeartbeatParams{ID: "tr-1", Runner: "i-b", Until: now}); held {
		t.Fatal("a runner without the lease is told it holds it")
	}
	got, _ := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"})
	if got.BytesDone != 40 || got.Streams != 2 || got.Attempts != 1 || got.StartedAt == nil {
		t.Fatalf("progress saved by the heartbeat: %+v", got)
	}
	// After the lease expires another runner takes over.
	if r := acquire("tr-1", "i-b", now.Add(2*time.Minute)); r != LeaseAcquired {
		t.Fatalf("acquire after expiry: %v", r)
	}
	if err := p.TransferFinish(ctx, &TransferFinishParams{ID: "tr-1", Runner: "i-b", Status: StatusSucceeded, Now: now}); err != nil {
		t.Fatal(err)
	}
	if r := acquire("tr-1", "i-c", now); r != LeaseTaken {
		t.Fatalf("acquire of a finished transfer: %v", r)
	}
	if r := acquire("tr-2", "i-b", now); r != LeaseAcquired {
		t.Fatalf("alice's second transfer after the first finished: %v", r)
	}
}

func contractReap(t *testing.T, p Persistence) {
	ctx := t.Context()
	now := time.Now()
	for _, id := range []string{"tr-1", "tr-2", "tr-3"} {
		mustInsert(t, p, id, "alice", "")
		if r, err := p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: id, Runner: "i-dead", Now: now, Until: now.Add(time.Second)}); err != nil || r != LeaseAcquired {
			t.Fatal(r, err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			tx, err := p.DB().BeginTx(ctx, nil)
			if err != nil {
				errs <- err
				return
			}
			defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
			ids, err := p.LeaseReap(ctx, tx, &LeaseReapParams{Now: now.Add(time.Minute)})
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			for _, id := range ids {
				seen[id]++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen["tr-1"] != 1 || seen["tr-2"] != 1 || seen["tr-3"] != 1 {
		t.Fatalf("reaped ids: %v, want each of 3 once", seen)
	}
	got, _ := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"})
	if got.Status != StatusQueued {
		t.Fatalf("reaped transfer: %s", got.Status)
	}
}

func contractCancel(t *testing.T, p Persistence) {
	ctx := t.Context()
	now := time.Now()
	mustInsert(t, p, "tr-1", "alice", "")
	mustInsert(t, p, "tr-2", "alice", "")
	if _, err := p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: "tr-1", Runner: "i-a", Now: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	res, err := p.TransferCancel(ctx, &TransferCancelParams{Owner: "alice", ID: "tr-1", Now: now})
	if err != nil || !res.Changed || !res.LeaseLive {
		t.Fatalf("cancel of a running transfer: %+v %v", res, err)
	}
	if res, _ := p.TransferCancel(ctx, &TransferCancelParams{Owner: "alice", ID: "tr-2", Now: now}); !res.Changed || res.LeaseLive {
		t.Fatalf("cancel of a queued transfer: %+v", res)
	}
	if res, _ := p.TransferCancel(ctx, &TransferCancelParams{Owner: "alice", ID: "tr-1", Now: now}); res.Changed {
		t.Fatal("second cancel changed something")
	}
	// The runner on the other instance notices at its next range, then finishes.
	if err := p.ItemsPlan(ctx, &ItemsPlanParams{ID: "tr-1", Items: []Item{{Seq: 0, Kind: KindFile, Size: 10, Status: ItemPending}}}); err != nil {
		t.Fatal(err)
	}
	if st, err := p.RangeDone(ctx, &RangeDoneParams{ID: "tr-1", Seq: 0, Idx: 0, BytesDone: 1}); err != nil || st != StatusCanceled {
		t.Fatalf("range done after cancel: %v %v, want canceled", st, err)
	}
	if err := p.TransferFinish(ctx, &TransferFinishParams{ID: "tr-1", Runner: "i-a", Status: StatusFailed, Error: "x", Now: now}); err != nil {
		t.Fatal(err)
	}
	got, _ := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"})
	if got.Status != StatusCanceled || got.Error != "canceled by the user" || got.FinishedAt == nil {
		t.Fatalf("after finish of a canceled transfer: %+v", got)
	}
	// A canceled transfer whose runner died before finishing: its expired lease is reaped once.
	mustInsert(t, p, "tr-3", "alice", "")
	if _, err := p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: "tr-3", Runner: "i-dead", Now: now, Until: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.TransferCancel(ctx, &TransferCancelParams{Owner: "alice", ID: "tr-3", Now: now}); err != nil {
		t.Fatal(err)
	}
	if ids, err := p.LeaseReapCanceled(ctx, &LeaseReapParams{Now: now}); err != nil || len(ids) != 0 {
		t.Fatalf("reap of a live lease: %v %v", ids, err)
	}
	for i, want := range []int{1, 0} {
		ids, err := p.LeaseReapCanceled(ctx, &LeaseReapParams{Now: now.Add(time.Minute)})
		if err != nil || len(ids) != want || (want == 1 && ids[0] != "tr-3") {
			t.Fatalf("reap canceled, round %d: %v %v", i, ids, err)
		}
	}
}

func contractRetrying(t *testing.T, p Persistence) {
	ctx := t.Context()
	now := time.Now()
	mustInsert(t, p, "tr-1", "alice", "")
	if _, err := p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: "tr-1", Runner: "i-a", Now: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	next := now.Add(30 * time.Second).UTC().Truncate(time.Microsecond)
	for range 2 {
		if err := p.TransferRetrying(ctx, &TransferRetryingParams{ID: "tr-1", Runner: "i-a", Error: "dial: connection refused", NextAttempt: next}); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := p.TransferGet(ctx, &TransferGetParams{Owner: "alice", ID: "tr-1"})
	if got.Status != StatusRetrying || got.Error != "dial: connection refused" || got.Retries != 2 || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(next) {
		t.Fatalf("retrying: %+v", got)
	}
	if err := p.TransferRetrying(ctx, &TransferRetryingParams{ID: "tr-1", Runner: "i-other", Error: "x", NextAttempt: next}); err != nil {
		t.Fatal(err)
	}
	if err := p.TransferResumed(ctx, &TransferLeaseParams{ID: "tr-1", Runner: "i-a"}); err != nil {
		t.Fatal(err)
	}
	got, _ = p.TransferGet(ctx, &TransferGetParams{Owner: "alice", ID: "tr-1"})
	if got.Status != StatusRunning || got.Retries != 2 || got.NextAttemptAt != nil {
		t.Fatalf("resumed (a runner without the lease changed nothing): %+v", got)
	}
}

// contractSlowRuns: the count of too-slow runs is kept in the transfer's row (so another
// instance, or this one after a restart, continues it), survives the lease being released and
// re-acquired, and only the lease holder can add to it.
func contractSlowRuns(t *testing.T, p Persistence) {
	ctx := t.Context()
	now := time.Now()
	mustInsert(t, p, "tr-1", "alice", "")
	for i, runner := range []string{"i-a", "i-b"} {
		if res, err := p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: "tr-1", Runner: runner, Now: now, Until: now.Add(time.Minute)}); err != nil || res != LeaseAcquired {
			t.Fatalf("acquire by %s: %v %v", runner, res, err)
		}
		n, err := p.TransferSlowRun(ctx, &TransferLeaseParams{ID: "tr-1", Runner: runner})
		if err != nil || n != i+1 {
			t.Fatalf("slow run %d by %s: %d, %v", i+1, runner, n, err)
		}
		if err := p.TransferFinish(ctx, &TransferFinishParams{ID: "tr-1", Runner: runner, Status: StatusQueued, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.TransferSlowRun(ctx, &TransferLeaseParams{ID: "tr-1", Runner: "i-gone"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("slow run without the lease: %v, want ErrNotFound", err)
	}
	got, err := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"})
	if err != nil || got.slowRuns != 2 {
		t.Fatalf("slow runs read back: %+v %v, want 2", got, err)
	}
}

func contractItems(t *testing.T, p Persistence) {
	ctx := t.Context()
	mustInsert(t, p, "tr-1", "alice", "")
	items := []Item{
		{Seq: 0, Kind: KindDir, Source: "/s", Destination: "/d", Status: ItemPending, mode: 0o755},
		{Seq: 1, Kind: KindFile, Source: "/s/a", Destination: "/d/a", Size: 100, Status: ItemPending, mtime: 1700000000, mode: 0o640},
		{Seq: 2, Kind: KindSymlink, Source: "/s/l", Destination: "/d/l", Status: ItemPending, linkTarget: "a"},
	}
	for range 2 { // a second plan replaces the first
		if err := p.ItemsPlan(ctx, &ItemsPlanParams{ID: "tr-1", Items: items, Streams: 4}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.ItemsList(ctx, &ItemsListParams{ID: "tr-1", After: -1})
	if err != nil || len(got) != 3 || got[1].mode != 0o640 || got[1].mtime != 1700000000 || got[2].linkTarget != "a" {
		t.Fatalf("items: %+v %v", got, err)
	}
	tr, _ := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"})
	if !tr.planned || tr.BytesTotal != 100 || tr.FilesTotal != 1 || tr.Streams != 4 {
		t.Fatalf("plan totals: %+v", tr)
	}
	for _, idx := range []int{0, 1, 1} { // recording a range twice is harmless
		st, err := p.RangeDone(ctx, &RangeDoneParams{ID: "tr-1", Seq: 1, Idx: idx, BytesDone: int64(idx+1) * 50, BytesRead: int64(idx+1) * 70})
		if err != nil || st != StatusQueued {
			t.Fatalf("range done: %v %v", st, err)
		}
	}
	if _, err := p.RangeDone(ctx, &RangeDoneParams{ID: "tr-1", Seq: 1, Idx: 0, BytesDone: 100, BytesRead: 10}); err != nil {
		t.Fatal(err)
	}
	if tr, _ := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"}); tr.BytesRead != 140 {
		t.Fatalf("bytes_read after ranges: %d, want the largest reported (140)", tr.BytesRead)
	}
	rs, err := p.RangesList(ctx, &TransferGetParams{ID: "tr-1"})
	if err != nil || len(rs[1]) != 2 {
		t.Fatalf("ranges: %v %v", rs, err)
	}
	it := got[1]
	it.Status, it.staged, it.SHA256, it.Attempts, it.BytesDone = ItemDone, true, "abc", 2, 100
	if err := p.ItemsSave(ctx, &ItemsSaveParams{ID: "tr-1", Items: []*Item{&it}}); err != nil {
		t.Fatal(err)
	}
	done, err := p.ItemsList(ctx, &ItemsListParams{ID: "tr-1", After: -1, Status: ItemDone})
	if err != nil || len(done) != 1 || !done[0].staged || done[0].SHA256 != "abc" || done[0].BytesDone != 100 {
		t.Fatalf("saved item: %+v %v", done, err)
	}
	// Staging writes attempts and staged only, by seq, whatever the attempts of each.
	stageItems := make([]Item, 1100)
	for i := range stageItems {
		stageItems[i] = Item{Seq: int64(i), Kind: KindFile, Source: fmt.Sprintf("/s/%d", i), Destination: fmt.Sprintf("/d/%d", i),
			Size: 7, Status: ItemPending, mtime: 1700000000, mode: 0o644}
	}
	mustInsert(t, p, "tr-2", "alice", "")
	if err := p.ItemsPlan(ctx, &ItemsPlanParams{ID: "tr-2", Items: stageItems, Streams: 1}); err != nil {
		t.Fatal(err)
	}
	var stage []*Item
	for i := 1; i < len(stageItems); i++ { // all but seq 0
		c := stageItems[i]
		c.Attempts, c.staged, c.Status, c.Error = 1+i%3, true, ItemFailed, "not saved by ItemsStage"
		stage = append(stage, &c)
	}
	if err := p.ItemsStage(ctx, &ItemsSaveParams{ID: "tr-2", Items: stage}); err != nil {
		t.Fatal(err)
	}
	staged, err := p.ItemsList(ctx, &ItemsListParams{ID: "tr-2", After: -1})
	if err != nil || len(staged) != len(stageItems) {
		t.Fatalf("staged items: %d %v", len(staged), err)
	}
	for i, it := range staged {
		wantAttempts, wantStaged := 1+i%3, true
		if i == 0 {
			wantAttempts, wantStaged = 0, false
		}
		if it.Attempts != wantAttempts || it.staged != wantStaged || it.Status != ItemPending || it.Error != "" || it.Size != 7 {
			t.Fatalf("staged item %d: %+v, want attempts %d staged %v and the rest as planned", i, it, wantAttempts, wantStaged)
		}
	}
	if err := p.RangesReset(ctx, &RangesResetParams{ID: "tr-1", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if rs, _ := p.RangesList(ctx, &TransferGetParams{ID: "tr-1"}); len(rs) != 0 {
		t.Fatalf("ranges after reset: %v", rs)
	}
}

// contractAppend: a plan stored chunk by chunk (ItemsAppend) keeps the items of every chunk in
// seq order, with full statements of the prepared INSERT and a partial one, leaves the transfer
// unplanned until the final chunk, and leaves the totals to the run; ItemsSave then writes each
// of hundreds of items' own fields.
func contractAppend(t *testing.T, p Persistence) {
	ctx := t.Context()
	mustInsert(t, p, "tr-1", "alice", "")
	items := make([]Item, 2*planInsertRows+7)
	for i := range items {
		items[i] = Item{Seq: int64(i), Kind: KindFile, Source: fmt.Sprintf("/s/%d", i), Destination: fmt.Sprintf("/d/%d", i),
			Size: int64(i), Status: ItemPending, mtime: 1700000000 + int64(i), mode: 0o640}
	}
	cut := planInsertRows + 3
	if err := p.ItemsAppend(ctx, &ItemsAppendParams{ID: "tr-1", Items: items[:cut]}); err != nil {
		t.Fatal(err)
	}
	if tr, _ := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"}); tr.planned || tr.FilesTotal != 0 {
		t.Fatalf("after the first chunk: planned %v files_total %d, want unplanned and the totals untouched", tr.planned, tr.FilesTotal)
	}
	if err := p.ItemsAppend(ctx, &ItemsAppendParams{ID: "tr-1", Items: items[cut:], Final: true}); err != nil {
		t.Fatal(err)
	}
	if err := p.ItemsAppend(ctx, &ItemsAppendParams{ID: "tr-1", Items: items[:1]}); err == nil {
		t.Fatal("a seq stored twice was accepted")
	}
	tr, _ := p.TransferGet(ctx, &TransferGetParams{ID: "tr-1"})
	got, err := p.ItemsList(ctx, &ItemsListParams{ID: "tr-1", After: -1})
	if err != nil || !tr.planned || len(got) != len(items) {
		t.Fatalf("after the final chunk: planned %v, %d items, %v", tr.planned, len(got), err)
	}
	for i, it := range got {
		if it.Seq != int64(i) || it.Source != items[i].Source || it.Size != int64(i) || it.mtime != items[i].mtime || it.mode != 0o640 {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	// ItemsSave writes each item's own fields; the item left out keeps its stored fields.
	var save []*Item
	for i := 1; i < len(got); i++ {
		c := got[i]
		c.Status, c.Size, c.mtime, c.BytesDone, c.Attempts = ItemDone, int64(i)+1, int64(i)*3, int64(i)+1, i%4
		c.Error, c.SHA256, c.staged = fmt.Sprintf("e%d", i), fmt.Sprintf("h%d", i), i%2 == 0
		save = append(save, &c)
	}
	if err := p.ItemsSave(ctx, &ItemsSaveParams{ID: "tr-1", Items: save}); err != nil {
		t.Fatal(err)
	}
	saved, err := p.ItemsList(ctx, &ItemsListParams{ID: "tr-1", After: -1})
	if err != nil || len(saved) != len(items) {
		t.Fatalf("saved items: %d %v", len(saved), err)
	}
	if it := saved[0]; it.Status != ItemPending || it.SHA256 != "" || it.Size != 0 {
		t.Fatalf("item 0, not saved: %+v", it)
	}
	for i, it := range saved[1:] {
		w := save[i]
		if it.Status != ItemDone || it.Size != w.Size || it.mtime != w.mtime || it.BytesDone != w.BytesDone || it.Attempts != w.Attempts ||
			it.Error != w.Error || it.SHA256 != w.SHA256 || it.staged != w.staged || it.Source != w.Source || it.mode != 0o640 {
			t.Fatalf("saved item %d: %+v, want %+v", it.Seq, it, *w)
		}
	}
	// An item saved twice in one call keeps its last state, as one statement each left it.
	first, second, other := saved[0], saved[0], saved[1]
	first.SHA256, second.SHA256, second.Status = "first", "second", ItemFailed
	if err := p.ItemsSave(ctx, &ItemsSaveParams{ID: "tr-1", Items: []*Item{&first, &other, &second}}); err != nil {
		t.Fatal(err)
	}
	again, err := p.ItemsList(ctx, &ItemsListParams{ID: "tr-1", After: -1, Limit: 1})
	if err != nil || len(again) != 1 || again[0].SHA256 != "second" || again[0].Status != ItemFailed {
		t.Fatalf("item saved twice: %+v %v, want the second state", again, err)
	}
}

// contractQuotaRace: submits that count the owner's unfinished transfers and insert only below a
// limit, all at once, never leave more than the limit (the count holds the owner's lock).
func contractQuotaRace(t *testing.T, p Persistence) {
	const limit, racers = 3, 12
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := p.DB().BeginTx(t.Context(), nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
			n, err := p.TransferCountUnfinished(t.Context(), tx, &TransferOwnerParams{Owner: "alice"})
			if err != nil {
				t.Error(err)
				return
			}
			if n >= limit {
				return
			}
			now := time.Now().UTC().Truncate(time.Microsecond)
			req := Request{Source: Endpoint{System: "a", Path: "/src"}, Destination: Endpoint{System: "b", Path: "/dst"}}
			deadline, err := req.normalize(now)
			if err != nil {
				t.Error(err)
				return
			}
			tr := &Transfer{ID: "q" + string(rune('a'+i)), Owner: "alice", Status: StatusQueued, Source: req.Source,
				Destination: req.Destination, Sync: req.Sync, Verify: req.Verify, ChunkSize: req.ChunkSize, CreatedAt: now, Deadline: deadline}
			if err := p.TransferInsert(t.Context(), tx, &TransferInsertParams{Transfer: tr, Request: req}); err != nil {
				t.Error(err)
				return
			}
			if err := tx.Commit(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	tx, err := p.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	n, err := p.TransferCountUnfinished(t.Context(), tx, &TransferOwnerParams{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if n != limit {
		t.Fatalf("%d transfers after %d racing submits with a limit of %d", n, racers, limit)
	}
}

// contractUploads: an object upload is recorded with its parts and hash state (which never goes
// back), listed for a resume, offered to the reaper only without a live runner (at once when
// the transfer finished, else when old), and forgotten.
func contractUploads(t *testing.T, p Persistence) {
	ctx := t.Context()
	now := time.Now()
	mustInsert(t, p, "tr-1", "alice", "")
	if err := p.ItemsPlan(ctx, &ItemsPlanParams{ID: "tr-1", Items: []Item{{Seq: 0, Kind: KindFile, Source: "/s", Destination: "/d", Size: 25, Status: ItemPending}}}); err != nil {
		t.Fatal(err)
	}
	save := func() {
		t.Helper()
		if err := p.UploadSave(ctx, &UploadSaveParams{ID: "tr-1", Now: now, Upload: UploadRecord{Seq: 0, UploadID: "u-1", Dst: "/d", PartSize: 10, SrcETag: "etag:x"}}); err != nil {
			t.Fatal(err)
		}
	}
	save()
	parts := []struct {
		n        int
		hashOff  int64
		hashSave []byte
	}{{2, 0, nil}, {1, 20, []byte{1, 2, 3}}, {1, 20, []byte{1, 2, 3}}, {3, 10, []byte{9}}} // the last must not move the hash back
	for _, pt := range parts {
		st, err := p.PartDone(ctx, &PartDoneParams{ID: "tr-1", Seq: 0, Part: storage.Part{Number: pt.n, Size: 10, ETag: "e", SHA256: []byte{byte(pt.n), 0xff}},
			BytesDone: 20, BytesRead: 30, HashOff: pt.hashOff, HashState: pt.hashSave})
		if err != nil || st != StatusQueued {
			t.Fatalf("part done: %v %v", st, err)
		}
	}
	ups, err := p.UploadsList(ctx, &TransferGetParams{ID: "tr-1"})
	if err != nil || len(ups) != 1 {
		t.Fatalf("uploads: %+v %v", ups, err)
	}
	u := ups[0]
	if u.UploadID != "u-1" || u.Dst != "/d" || u.PartSize != 10 || u.SrcETag != "etag:x" || u.HashOff != 20 || string(u.HashState) != "\x01\x02\x03" ||
		len(u.Parts) != 3 || u.Parts[0].Number != 1 || u.Parts[1].Offset != 10 || u.Parts[2].SHA256[0] != 3 || u.Parts[2].SHA256[1] != 0xff || u.Parts[0].ETag != "e" {
		t.Fatalf("upload record %+v", u)
	}
	if _, err := p.LeaseAcquire(ctx, &LeaseAcquireParams{ID: "tr-1", Runner: "i-a", Now: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	stale := func(before time.Time) []StaleUpload {
		t.Helper()
		s, err := p.UploadsStale(ctx, &UploadsStaleParams{Now: now, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := stale(now.Add(time.Hour)); len(s) != 0 {
		t.Fatalf("an upload of a transfer with a live runner is offered to the reaper: %+v", s)
	}
	if err := p.TransferFinish(ctx, &TransferFinishParams{ID: "tr-1", Runner: "i-a", Status: StatusFailed, Error: "x", Now: now}); err != nil {
		t.Fatal(err)
	}
	if s := stale(now.Add(-time.Hour)); len(s) != 1 || s[0].UploadID != "u-1" || s[0].Owner != "alice" || s[0].Dst != "/d" || s[0].Seq != 0 {
		t.Fatalf("stale uploads of a finished transfer: %+v", s)
	}
	save() // a new upload of the same item forgets the old parts
	if ups, _ := p.UploadsList(ctx, &TransferGetParams{ID: "tr-1"}); len(ups[0].Parts) != 0 || ups[0].HashOff != 0 {
		t.Fatalf("after a new upload: %+v", ups[0])
	}
	if err := p.UploadDelete(ctx, &RangesResetParams{ID: "tr-1", Seq: 0}); err != nil {
		t.Fatal(err)
	}
	if ups, _ := p.UploadsList(ctx, &TransferGetParams{ID: "tr-1"}); len(ups) != 0 {
		t.Fatalf("after delete: %+v", ups)
	}
	if s := stale(now.Add(time.Hour)); len(s) != 0 {
		t.Fatalf("stale after delete: %+v", s)
	}
}
