package transfer

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/shell"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestLargeFileStripedAndVerified moves a large file over several streams between two sshd
// processes and checks it arrives intact, under its final name only, read exactly once.
func TestLargeFileStripedAndVerified(t *testing.T) {
	size := int64(1 << 30) // the size; SSHAPI_TEST_QUICK=1 shrinks it for local iteration
	if testing.Short() || os.Getenv("SSHAPI_TEST_QUICK") != "" {
		size = 256 << 20
	}
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	want := randomFile(t, filepath.Join(srcDir, "big.bin"), size, 1)

	start := time.Now()
	tr := h.submit("alice", Request{
		Source:      Endpoint{System: "a", Path: filepath.Join(srcDir, "big.bin")},
		Destination: Endpoint{System: "b", Path: dstDir + "/"},
		Streams:     4,
	})
	tr = h.wait("alice", tr.ID, 5*time.Minute, nil)
	el := time.Since(start)
	if tr.Status != StatusSucceeded {
		t.Fatalf("status %s: %s", tr.Status, tr.Error)
	}
	if got := fileSHA(t, filepath.Join(dstDir, "big.bin")); got != want {
		t.Fatalf("destination sha256 %s, want %s", got, want)
	}
	if tr.BytesDone != size || tr.BytesTotal != size || tr.FilesDone != 1 || tr.Streams != 4 {
		t.Fatalf("progress %+v", tr)
	}
	if tr.BytesRead != size {
		t.Fatalf("read %d bytes from the source for a %d-byte file without faults", tr.BytesRead, size)
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	items, err := h.eng.Items(t.Context(), "alice", tr.ID, -1, 0, "")
	if err != nil || len(items) != 1 || items[0].SHA256 != want ||
		items[0].Ranges != int(size/DefaultChunkSize) || items[0].RangesDone != items[0].Ranges {
		t.Fatalf("items %+v %v", items, err)
	}
	t.Logf("%d MiB in %s (%.0f MiB/s incl. verification)", size>>20, el.Round(time.Millisecond), float64(size)/(1<<20)/el.Seconds())
}

// TestManySmallFiles copies a tree of 10,000 small files, empty directories and a symlink.
func TestManySmallFiles(t *testing.T) {
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	root := filepath.Join(srcDir, "tree")
	const dirs, per = 100, 100
	for d := range dirs {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range per {
			content := bytes.Repeat([]byte(fmt.Sprintf("%d/%d;", d, f)), (d*per+f)%97)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), content, 0o640); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d000/f000", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		owned(t, a, p)
		return err
	})
	start := time.Now()
	tr := h.submit("alice", Request{
		Source: Endpoint{System: "a", Path: root}, Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "copy")},
		Recursive: true,
	})
	tr = h.wait("alice", tr.ID, 5*time.Minute, nil)
	if tr.Status != StatusSucceeded || tr.FilesTotal != dirs*per || tr.FilesDone != dirs*per {
		t.Fatalf("transfer %+v", tr)
	}
	t.Logf("%d files in %s", dirs*per, time.Since(start).Round(time.Millisecond))
	for d := range dirs {
		for f := range per {
			rel := filepath.Join(fmt.Sprintf("d%03d", d), fmt.Sprintf("f%03d", f))
			want, _ := os.ReadFile(filepath.Join(root, rel))
			got, err := os.ReadFile(filepath.Join(dstDir, "copy", rel))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %v (got %d bytes, want %d)", rel, err, len(got), len(want))
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(dstDir, "copy", "d001", "f001")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode not preserved: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dstDir, "copy", "empty")); err != nil || !fi.IsDir() {
		t.Fatalf("empty directory: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(dstDir, "copy", "link")); err != nil || target != "d000/f000" {
		t.Fatalf("symlink: %q %v", target, err)
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left[:min(5, len(left))])
	}
}

// faultRun starts a rate-limited transfer of a large file, calls fault once a quarter has
// arrived, and checks that the transfer completes intact and re-read at most one range per
// stream.
func faultRun(t *testing.T, fault func(h *harness, a *sshtest.Server)) {
	const size, chunk, streams = 96 << 20, 4 << 20, 4
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, slowProxy(t, a, 32<<20))
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	want := randomFile(t, filepath.Join(srcDir, "big.bin"), size, 2)
	tr := h.submit("alice", Request{
		Source:      Endpoint{System: "a", Path: filepath.Join(srcDir, "big.bin")},
		Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "big.bin")},
		Streams:     streams, ChunkSize: chunk,
	})
	h.wait("alice", tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= size/4 })
	fault(h, a)
	tr = h.wait("alice", tr.ID, 3*time.Minute, nil)
	if tr.Status != StatusSucceeded {
		t.Fatalf("status %s: %s", tr.Status, tr.Error)
	}
	if got := fileSHA(t, filepath.Join(dstDir, "big.bin")); got != want {
		t.Fatalf("sha256 %s, want %s", got, want)
	}
	extra := tr.BytesRead - size
	if extra < 0 || extra > streams*chunk {
		t.Fatalf("read %d bytes from the source for %d: %d extra, more than one %d-byte range per stream (%d)", tr.BytesRead, size, extra, chunk, streams)
	}
	if tr.Attempts < 1 {
		t.Fatalf("attempts %d", tr.Attempts)
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	t.Logf("fault cost %d bytes re-read (%.1f ranges of %d MiB); attempts %d", extra, float64(extra)/chunk, chunk>>20, tr.Attempts)
}

// TestResumesAfterSSHDRestart kills the source's sshd (and every connection) mid-transfer.
func TestResumesAfterSSHDRestart(t *testing.T) {
	faultRun(t, func(h *harness, a *sshtest.Server) {
		a.Kill()
		time.Sleep(300 * time.Millisecond)
		if err := a.Restart(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestResumesAfterEngineRestart stops sshapi's engine mid-transfer and starts a new one on the
// same database.
func TestResumesAfterEngineRestart(t *testing.T) {
	faultRun(t, func(h *harness, a *sshtest.Server) {
		h.stop()
		h.start()
	})
}

// TestCancelRemovesTemporaryFiles cancels a transfer with files in flight.
func TestCancelRemovesTemporaryFiles(t *testing.T) {
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, slowProxy(t, a, 16<<20))
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	root := filepath.Join(srcDir, "tree")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	randomFile(t, filepath.Join(root, "big.bin"), 64<<20, 3)
	for i := range 200 {
		randomFile(t, filepath.Join(root, fmt.Sprintf("s%03d", i)), 64<<10, uint64(i))
	}
	tr := h.submit("alice", Request{
		Source: Endpoint{System: "a", Path: root}, Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "copy")},
		Recursive: true, Streams: 2, ChunkSize: 4 << 20,
	})
	h.wait("alice", tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone > 8<<20 && len(temps(t, dstDir)) > 0 })
	got, err := h.eng.Cancel(t.Context(), "alice", tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusCanceled {
		t.Fatalf("status after cancel: %s", got.Status)
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Fatalf("temporary files left after cancel: %v", left[:min(5, len(left))])
	}
	if _, err := os.Stat(filepath.Join(dstDir, "copy", "big.bin")); err == nil {
		t.Fatal("the large file was renamed into place after cancel")
	}
	// Canceling again changes nothing; the job does not resurrect the transfer.
	if got, err := h.eng.Cancel(t.Context(), "alice", tr.ID); err != nil || got.Status != StatusCanceled {
		t.Fatalf("second cancel: %+v %v", got, err)
	}
	time.Sleep(300 * time.Millisecond)
	if got, _ := h.eng.Get(t.Context(), "alice", tr.ID); got.Status != StatusCanceled || len(temps(t, dstDir)) > 0 {
		t.Fatalf("after cancel: %+v, temps %v", got, temps(t, dstDir))
	}
}

// TestSyncLevels checks which existing destination files each sync level skips.
func TestSyncLevels(t *testing.T) {
	h := newHarness(t, testConfig())
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	newer := old.Add(time.Hour)
	// name: source content; destination content and mtime (nil = absent)
	type file struct {
		src, dst   string
		dstMtime   time.Time
		hasDst     bool
		copiedWith []Sync // levels that must copy it
	}
	files := map[string]file{
		"identical":           {src: "same", dst: "same", dstMtime: old, hasDst: true, copiedWith: []Sync{SyncAlways}},
		"same-size-same-time": {src: "abcd", dst: "wxyz", dstMtime: old, hasDst: true, copiedWith: []Sync{SyncAlways, SyncChecksum}},
		"same-size-new-time":  {src: "abcd", dst: "wxyz", dstMtime: newer, hasDst: true, copiedWith: []Sync{SyncAlways, SyncMtime, SyncChecksum}},
		"other-size":          {src: "longer", dst: "short", dstMtime: old, hasDst: true, copiedWith: []Sync{SyncAlways, SyncSize, SyncMtime, SyncChecksum}},
		"missing":             {src: "new", copiedWith: []Sync{SyncAlways, SyncExists, SyncSize, SyncMtime, SyncChecksum}},
	}
	for _, level := range []Sync{SyncAlways, SyncExists, SyncSize, SyncMtime, SyncChecksum} {
		t.Run(string(level), func(t *testing.T) {
			srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
			for name, f := range files {
				sp := filepath.Join(srcDir, name)
				if err := os.WriteFile(sp, []byte(f.src), 0o644); err != nil {
					t.Fatal(err)
				}
				_ = os.Chtimes(sp, old, old)
				if f.hasDst {
					dp := filepath.Join(dstDir, name)
					if err := os.WriteFile(dp, []byte(f.dst), 0o644); err != nil {
						t.Fatal(err)
					}
					owned(t, b, dp)
					_ = os.Chtimes(dp, f.dstMtime, f.dstMtime)
				}
			}
			tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: srcDir}, Destination: Endpoint{System: "b", Path: dstDir},
				Recursive: true, Sync: level})
			tr = h.wait("alice", tr.ID, time.Minute, nil)
			if tr.Status != StatusSucceeded {
				t.Fatalf("status %s: %s", tr.Status, tr.Error)
			}
			skipped := 0
			for name, f := range files {
				got, _ := os.ReadFile(filepath.Join(dstDir, name))
				copied := string(got) == f.src && (f.src != f.dst)
				want := false
				for _, l := range f.copiedWith {
					want = want || l == level
				}
				if name == "identical" {
					continue // same bytes either way
				}
				if copied != want {
					t.Errorf("%s: copied=%v, want %v (destination holds %q)", name, copied, want, got)
				}
				if !want {
					skipped++
				}
			}
			if level != SyncAlways {
				skipped++ // "identical" is skipped by every level but always
			}
			if int(tr.FilesSkipped) != skipped || tr.FilesDone != int64(len(files)) {
				t.Errorf("files_skipped %d, want %d; files_done %d", tr.FilesSkipped, skipped, tr.FilesDone)
			}
		})
	}
}

// TestSameSystemCopiesOnServer copies hostile names within one system: no byte passes through
// sshapi and every name arrives intact.
func TestSameSystemCopiesOnServer(t *testing.T) {
	h := newHarness(t, testConfig())
	a := sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	dir := a.MkTemp(t)
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"plain", "with space", "quote'in", `dq"x`, "-leading-dash", "$(touch PWNED)", "back\\slash", "new\nline", "semi;colon&"}
	for i, n := range names {
		if err := os.WriteFile(filepath.Join(src, n), bytes.Repeat([]byte{byte(i)}, 1000+i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	randomFile(t, filepath.Join(src, "big"), 40<<20, 9)
	owned(t, a, dir)
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: src}, Destination: Endpoint{System: "a", Path: filepath.Join(dir, "dst")}, Recursive: true})
	tr = h.wait("alice", tr.ID, time.Minute, nil)
	if tr.Status != StatusSucceeded || !tr.SameSystem {
		t.Fatalf("transfer %+v", tr)
	}
	if tr.BytesRead != 0 {
		t.Fatalf("%d bytes passed through sshapi for a same-system copy", tr.BytesRead)
	}
	for _, n := range append(names, "big") {
		if fileSHA(t, filepath.Join(src, n)) != fileSHA(t, filepath.Join(dir, "dst", n)) {
			t.Errorf("%q differs", n)
		}
	}
	if _, err := os.Stat(filepath.Join(a.Home, "PWNED")); err == nil {
		t.Fatal("a file name was executed by the shell")
	}
	if left := temps(t, dir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestPermanentErrorsFailFast checks that errors retrying cannot fix fail the transfer at once.
func TestPermanentErrorsFailFast(t *testing.T) {
	h := newHarness(t, Config{RetryBase: 10 * time.Second, PollInterval: 50 * time.Millisecond})
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	if err := os.WriteFile(filepath.Join(srcDir, "secret"), []byte("x"), 0o600); err != nil { // root-owned, unreadable
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(srcDir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, src, dstSystem, want string
		recursive                  bool
	}{
		{"missing source", filepath.Join(srcDir, "nope"), "b", "not exist", false},
		{"permission denied", filepath.Join(srcDir, "secret"), "b", "permission denied", false},
		{"directory without recursive", filepath.Join(srcDir, "dir"), "b", "set recursive", false},
		{"unknown system", filepath.Join(srcDir, "dir"), "gone", "system", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: c.src}, Destination: Endpoint{System: c.dstSystem, Path: filepath.Join(dstDir, "x")}, Recursive: c.recursive})
			tr = h.wait("alice", tr.ID, 8*time.Second, nil)
			if tr.Status != StatusFailed || !strings.Contains(strings.ToLower(tr.Error), c.want) {
				t.Fatalf("status %s error %q, want failed with %q", tr.Status, tr.Error, c.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %s: a permanent error was retried", d)
			}
		})
	}
}

// TestIdempotencyKey checks that a key returns the first transfer of its owner.
func TestIdempotencyKey(t *testing.T) {
	h := newHarness(t, testConfig())
	req := Request{Source: Endpoint{System: "a", Path: "/nope"}, Destination: Endpoint{System: "b", Path: "x"}, IdempotencyKey: "k1"}
	first, created, err := h.eng.Submit(t.Context(), "alice", req)
	if err != nil || !created {
		t.Fatal(err, created)
	}
	again, created, err := h.eng.Submit(t.Context(), "alice", req)
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("same key: %v created=%v id %s vs %s", err, created, again.ID, first.ID)
	}
	other := req
	other.Destination.Path = "y"
	if _, _, err := h.eng.Submit(t.Context(), "alice", other); !errors.Is(err, ErrConflict) {
		t.Fatalf("same key, other request: %v", err)
	}
	bobs, created, err := h.eng.Submit(t.Context(), "bob", req)
	if err != nil || !created || bobs.ID == first.ID {
		t.Fatalf("other owner: %v %v", err, created)
	}
	if _, err := h.eng.Get(t.Context(), "bob", first.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob sees alice's transfer: %v", err)
	}
	noKey := req
	noKey.IdempotencyKey = ""
	x, _, _ := h.eng.Submit(t.Context(), "alice", noKey)
	y, _, _ := h.eng.Submit(t.Context(), "alice", noKey)
	if x.ID == y.ID {
		t.Fatal("submissions without a key were merged")
	}
}

// TestRequestValidation checks that bad input names its field.
func TestRequestValidation(t *testing.T) {
	ok := Request{Source: Endpoint{System: "a", Path: "f"}, Destination: Endpoint{System: "b", Path: "g"}}
	cases := []struct {
		field string
		edit  func(*Request)
	}{
		{"source.system", func(r *Request) { r.Source.System = "" }},
		{"destination.path", func(r *Request) { r.Destination.Path = "" }},
		{"source.path", func(r *Request) { r.Source.Path = "a\x00b" }},
		{"destination.path", func(r *Request) { r.Destination = Endpoint{System: "a", Path: "./f"} }},
		{"sync", func(r *Request) { r.Sync = "sometimes" }},
		{"verify", func(r *Request) { r.Verify = "md5" }},
		{"streams", func(r *Request) { r.Streams = 17 }},
		{"streams", func(r *Request) { r.Streams = -1 }},
		{"chunk_size", func(r *Request) { r.ChunkSize = 1000 }},
		{"deadline", func(r *Request) { r.Deadline = "tomorrow" }},
		{"deadline", func(r *Request) { r.Deadline = "2001-01-01T00:00:00Z" }},
		{"", func(r *Request) { r.Deadline = "90m" }},
	}
	for _, c := range cases {
		r := ok
		c.edit(&r)
		_, err := r.normalize(time.Now())
		var fe *FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("valid request rejected: %v", err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%+v: error %v, want one naming %s", r, err, c.field)
		}
	}
	r := ok
	if _, err := r.normalize(time.Now()); err != nil || r.Sync != SyncAlways || r.Verify != VerifySHA256 || r.ChunkSize != DefaultChunkSize {
		t.Fatalf("defaults: %+v %v", r, err)
	}
}

// TestShellQuote covers the quoting of a name with a single quote in generated scripts.
func TestShellQuote(t *testing.T) {
	if q := shell.Quote("it's"); q != `'it'\''s'` {
		t.Errorf("quote: %s", q)
	}
}

// crashedEngine sets up what a crashed instance leaves behind: with the engine stopped, the
// transfer id (a 3 MiB file a:f → b:g) is inserted queued, then leftOver changes the database in
// the same transaction. It returns the file's path, its SHA-256 and the destination.
func crashedEngine(t *testing.T, h *harness, id string, leftOver func(tx *sql.Tx, now time.Time) error) (want, dst string) {
	t.Helper()
	a := sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", a, "")
	dir := a.MkTemp(t)
	want = randomFile(t, filepath.Join(dir, "f"), 3<<20, 5)
	h.stop()
	sqlDB, err := OpenSQLite(t.Context(), h.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	req := Request{Source: Endpoint{System: "a", Path: filepath.Join(dir, "f")}, Destination: Endpoint{System: "b", Path: filepath.Join(dir, "g")}}
	now := time.Now().UTC()
	deadline, err := req.normalize(now)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Transfer{ID: id, Owner: "alice", Status: StatusQueued, Source: req.Source, Destination: req.Destination,
		Sync: req.Sync, Verify: req.Verify, ChunkSize: req.ChunkSize, CreatedAt: now, Deadline: deadline}
	tx, err := sqlDB.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlDB.TransferInsert(t.Context(), tx, &TransferInsertParams{Transfer: tr, Request: req}); err != nil {
		t.Fatal(err)
	}
	if err := leftOver(tx, now); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return want, filepath.Join(dir, "g")
}

// TestReaperResumesOrphanedTransfer stands for sshapi dying mid-transfer (no graceful stop): a
// running transfer whose runner stopped heartbeating and has no live job is re-queued by the
// reaper of the next engine and completes.
func TestReaperResumesOrphanedTransfer(t *testing.T) {
	h := newHarness(t, testConfig())
	// Status running, a lease that has expired, and no job at all.
	want, dst := crashedEngine(t, h, "tr-orphan", func(tx *sql.Tx, now time.Time) error {
		_, err := tx.ExecContext(t.Context(), `UPDATE transfers SET status = 'running', lease_owner = 'i-dead', lease_until = ? WHERE id = ?`,
			micros(now.Add(-time.Second)), "tr-orphan")
		return err
	})
	h.start()
	got := h.wait("alice", "tr-orphan", 30*time.Second, nil)
	if got.Status != StatusSucceeded || fileSHA(t, dst) != want {
		t.Fatalf("orphan after restart: %+v", got)
	}
}

// TestStuckJobIsRescued: a transfer queued whose River job was left "running" by an instance
// that died after fetching it (before its run took the lease) runs within a few lease lengths,
// not after River's default hour.
func TestStuckJobIsRescued(t *testing.T) {
	h := newHarness(t, testConfig())
	want, dst := crashedEngine(t, h, "tr-stuck", func(tx *sql.Tx, _ time.Time) error {
		_, err := tx.ExecContext(t.Context(), `INSERT INTO river_job (args, attempt, attempted_at, attempted_by, kind, max_attempts, queue, state)
			VALUES (json(?), 1, strftime('%Y-%m-%d %H:%M:%f', 'now', '-20 minutes'), json('["i-dead"]'), ?, 50, ?, 'running')`,
			`{"transfer_id":"tr-stuck"}`, jobArgs{}.Kind(), queueName)
		return err
	})
	h.start()
	got := h.wait("alice", "tr-stuck", 90*time.Second, nil)
	if got.Status != StatusSucceeded || fileSHA(t, dst) != want {
		t.Fatalf("stuck job: %+v", got)
	}
}

// TestDuplicateJobOnSameInstance: two jobs for one transfer fetched by the same engine (River
// rescues a job that has run longer than RescueStuckJobsAfter while its run is alive; the soak
// saw one) must not run the transfer twice at once. The lease is re-entrant for its holder, so
// only the engine's own record of what it runs stops the second: without it both runs take the
// lease (attempts 2) and delete each other's temporary file.
func TestDuplicateJobOnSameInstance(t *testing.T) {
	h := newHarness(t, testConfig())
	want, dst := crashedEngine(t, h, "tr-dup", func(tx *sql.Tx, _ time.Time) error {
		for range 2 {
			_, err := tx.ExecContext(t.Context(), `INSERT INTO river_job (args, kind, max_attempts, queue, state)
				VALUES (json(?), ?, 50, ?, 'available')`, `{"transfer_id":"tr-dup"}`, jobArgs{}.Kind(), queueName)
			if err != nil {
				return err
			}
		}
		return nil
	})
	h.start()
	got := h.wait("alice", "tr-dup", 90*time.Second, nil)
	if got.Status != StatusSucceeded || fileSHA(t, dst) != want {
		t.Fatalf("transfer: %+v", got)
	}
	if got.Attempts != 1 {
		t.Fatalf("the transfer ran %d times; want once (the second job must be ignored)", got.Attempts)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".*.part")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestReapedWhileRunningHereRunsAgain: the reaper re-queues a transfer whose lease lapsed while
// its run on this same engine is still alive (renewals hang, as when a loaded database starves
// the heartbeat); the engine fetches that job before the old run has stopped. The job must not
// be completed as a duplicate: once the old run stops, the transfer is queued with no other job
// and would stay so. It is snoozed, runs once the old run is over, and the transfer succeeds.
func TestReapedWhileRunningHereRunsAgain(t *testing.T) {
	h, dbw, tr, dst, want := startHangable(t, 64<<20, 9)
	dbw.hang.Store(true)
	// Another instance's reaper sees the lease as over: end it in the database and reap now.
	sqlDB, err := OpenSQLite(t.Context(), h.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	if _, err := sqlDB.DB().ExecContext(t.Context(), `UPDATE transfers SET lease_until = 1 WHERE id = ?`, tr.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.reap(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.waitRunGone(tr.ID)
	dbw.hang.Store(false)
	got := h.wait("alice", tr.ID, time.Minute, nil)
	if got.Status != StatusSucceeded || fileSHA(t, dst) != want {
		t.Fatalf("transfer after its re-queue: %+v", got)
	}
	if got.Attempts != 2 {
		t.Fatalf("%d attempts, want 2 (the first run, then the re-queued job once it had stopped)", got.Attempts)
	}
}

// hangingRenewals is the real database, except that lease renewals hang while hang is set: a
// database that stops answering one instance.
type hangingRenewals struct {
	Persistence
	hang atomic.Bool
}

func (h *hangingRenewals) LeaseHeartbeat(ctx context.Context, p *LeaseHeartbeatParams) (Status, bool, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return "", false, ctx.Err()
	}
	return h.Persistence.LeaseHeartbeat(ctx, p)
}

// TestRunStopsWhenItCannotRenew: a run whose lease renewals hang stops itself before its lease
// ends, so that the run which takes the transfer over (here: the same engine's, after the
// reaper re-queues it) never writes beside it; the transfer then finishes verified. Without the
// fence the first run writes on to the end (attempts 1).
func TestRunStopsWhenItCannotRenew(t *testing.T) {
	h, dbw, tr, dst, want := startHangable(t, 96<<20, 7)
	dbw.hang.Store(true)
	h.waitRunGone(tr.ID)
	mid, err := h.eng.Get(t.Context(), "alice", tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	dbw.hang.Store(false)
	got := h.wait("alice", tr.ID, 2*time.Minute, nil)
	if got.Status != StatusSucceeded || fileSHA(t, dst) != want {
		t.Fatalf("transfer: %+v", got)
	}
	if mid.Status == StatusSucceeded || got.Attempts != 2 {
		t.Fatalf("the run went on without its lease: status %s when it stopped, %d attempts", mid.Status, got.Attempts)
	}
}

// startHangable starts an engine whose lease renewals hang while the returned hangingRenewals'
// hang is set, and a transfer of a random file of size bytes (seed) from a system behind a
// 16 MiB/s proxy to another, and waits until more than its first chunk is done. It returns the
// transfer, its destination path and the file's SHA-256.
func startHangable(t *testing.T, size int64, seed uint64) (*harness, *hangingRenewals, *Transfer, string, string) {
	t.Helper()
	h := newHarness(t, testConfig())
	h.stop()
	dbw := &hangingRenewals{}
	h.wrap = func(p Persistence) Persistence { dbw.Persistence = p; return dbw }
	h.start()
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, slowProxy(t, a, 16<<20))
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	want := randomFile(t, filepath.Join(srcDir, "big.bin"), size, seed)
	dst := filepath.Join(dstDir, "big.bin")
	tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: filepath.Join(srcDir, "big.bin")},
		Destination: Endpoint{System: "b", Path: dst}, ChunkSize: 4 << 20})
	h.wait("alice", tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone > 4<<20 })
	return h, dbw, tr, dst, want
}

// waitRunGone waits (up to a minute) until the engine has no run of transfer id.
func (h *harness) waitRunGone(id string) {
	running := func() bool {
		h.eng.mu.Lock()
		defer h.eng.mu.Unlock()
		_, ok := h.eng.runs[id]
		return ok
	}
	for deadline := time.Now().Add(time.Minute); running() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}
