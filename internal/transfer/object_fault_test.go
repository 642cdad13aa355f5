package transfer

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/storage"
	s3store "github.com/sshapi/sshapi/internal/storage/s3"
	"github.com/sshapi/sshapi/internal/wanem"
)

const faultPart = 5 << 20

// objectFault is an SFTP→S3 transfer of one file of parts × faultPart bytes (plus a short last
// part) from a source behind a link of rate bytes/s, with the bucket reached through a
// partProxy.
type objectFault struct {
	h     *harness
	a     *sshtest.Server
	srv   *s3test.Server
	proxy *partProxy
	b     *s3store.Backend
	want  string
	size  int64
	tr    *Transfer
}

func startObjectFault(t *testing.T, parts int, rate int64, corrupt string) *objectFault {
	t.Helper()
	f := &objectFault{h: newHarness(t, testConfig()), srv: s3test.New(t)}
	a := sshtest.New(t, sshtest.Options{})
	f.a = a
	addr := ""
	if rate > 0 {
		addr = slowProxy(t, a, rate)
	}
	f.h.sys.add("alice", "a", a, addr)
	f.proxy = newPartProxy(t, f.srv.Endpoint)
	f.proxy.corrupt = corrupt
	f.b = bucket(t, f.srv, f.proxy.URL)
	f.h.sys.addStorage("alice", "s", f.b)
	dir := a.MkTemp(t)
	f.size = int64(parts)*faultPart + 4321
	f.want = randomFile(t, filepath.Join(dir, "big.bin"), f.size, 5)
	owned(t, a, filepath.Join(dir, "big.bin"))
	f.tr = f.h.submit("alice", Request{Source: Endpoint{System: "a", Path: filepath.Join(dir, "big.bin")},
		Destination: Endpoint{System: "s", Path: "/big.bin"}, ChunkSize: faultPart, Streams: 2})
	return f
}

// succeeded waits for the transfer to succeed and checks the object.
func (f *objectFault) succeeded(t *testing.T) *Transfer {
	t.Helper()
	tr := f.h.wait("alice", f.tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded {
		t.Fatalf("status %s: %s", tr.Status, tr.Error)
	}
	if got := objectSHA(t, f.b, "/big.bin"); got != f.want {
		t.Fatalf("object sha256 %s, want %s", got, f.want)
	}
	items, err := f.h.eng.Items(t.Context(), "alice", tr.ID, -1, 0, "")
	if err != nil || len(items) != 1 || items[0].SHA256 != f.want {
		t.Fatalf("items %+v %v", items, err)
	}
	if n := multipartUploads(t, f.b, f.b.Bucket()); n != 0 {
		t.Fatalf("%d incomplete multipart uploads left", n)
	}
	return tr
}

// TestObjectCorruptPartResent: one byte of one part is flipped on the way to the server, which
// refuses the part (its SHA-256 does not match); the part is sent again and the object is right.
func TestObjectCorruptPartResent(t *testing.T) {
	f := startObjectFault(t, 3, 0, "2")
	f.succeeded(t)
	f.proxy.mu.Lock()
	defer f.proxy.mu.Unlock()
	if f.proxy.corrupted != 1 || len(f.proxy.refused) != 1 || f.proxy.refused[0] != "BadDigest" {
		t.Fatalf("corrupted %d uploads, server answered %v; want one refused with BadDigest", f.proxy.corrupted, f.proxy.refused)
	}
	for n := 1; n <= 4; n++ {
		if c := f.proxy.puts[strconv.Itoa(n)]; c != 1 {
			t.Fatalf("part %d accepted %d times, want once", n, c)
		}
	}
}

// TestObjectServerKilled: the object server dies mid-transfer; the transfer shows retrying with
// the error, and finishes verified once the server is back (same port and directory).
func TestObjectServerKilled(t *testing.T) {
	f := startObjectFault(t, 8, 16<<20, "")
	f.h.wait("alice", f.tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= faultPart })
	f.srv.Kill()
	got := f.h.wait("alice", f.tr.ID, time.Minute, func(tr *Transfer) bool { return tr.Status == StatusRetrying })
	if got.Error == "" || got.NextAttemptAt == nil {
		t.Fatalf("retrying transfer without an error: %+v", got)
	}
	t.Logf("while the server is down: %s", got.Error)
	if err := f.srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr := f.succeeded(t)
	if tr.Retries < 1 {
		t.Fatalf("retries %d", tr.Retries)
	}
	total := 0
	for n := 1; n <= 9; n++ {
		total += f.proxy.count(strconv.Itoa(n))
	}
	if total > 9+2*2 { // the parts in flight when it died (two streams), perhaps twice
		t.Fatalf("%d part uploads for 9 parts: finished parts were sent again", total)
	}
	if tr.BytesDone != f.size {
		t.Fatalf("bytes done %d, want %d", tr.BytesDone, f.size)
	}
}

// TestObjectEngineRestart: the engine stops mid-transfer and a new one resumes it from the
// database: the parts recorded as finished are not sent again, the upload is the same.
func TestObjectEngineRestart(t *testing.T) {
	f := startObjectFault(t, 8, 16<<20, "")
	f.h.wait("alice", f.tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= 2*faultPart })
	f.h.stop()
	db, err := OpenSQLite(t.Context(), f.h.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	ups, err := db.UploadsList(t.Context(), &TransferGetParams{ID: f.tr.ID})
	db.Close()
	if err != nil || len(ups) != 1 {
		t.Fatalf("uploads recorded at the stop: %+v %v", ups, err)
	}
	var recorded []storage.Part
	var uploadID string
	for _, u := range ups {
		recorded, uploadID = u.Parts, u.UploadID
	}
	if len(recorded) < 2 || uploadID == "" {
		t.Fatalf("%d parts recorded at the stop (upload %q), want at least 2", len(recorded), uploadID)
	}
	f.h.start()
	f.succeeded(t)
	total := 0
	for n := 1; n <= 9; n++ {
		total += f.proxy.count(strconv.Itoa(n))
	}
	for _, p := range recorded {
		if c := f.proxy.count(strconv.Itoa(p.Number)); c != 1 {
			t.Fatalf("part %d, finished before the stop, was uploaded %d times", p.Number, c)
		}
	}
	if total > 9+2 { // at most one part in flight per stream is sent again
		t.Fatalf("%d part uploads for 9 parts", total)
	}
	t.Logf("%d parts recorded at the stop; %d part uploads in all for 9 parts", len(recorded), total)
}

// TestObjectCancelAborts: a canceled transfer leaves no incomplete multipart upload and no
// object.
func TestObjectCancelAborts(t *testing.T) {
	f := startObjectFault(t, 8, 16<<20, "")
	f.h.wait("alice", f.tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= faultPart })
	if n := multipartUploads(t, f.b, f.b.Bucket()); n != 1 {
		t.Fatalf("%d multipart uploads in flight, want 1", n)
	}
	got, err := f.h.eng.Cancel(t.Context(), "alice", f.tr.ID)
	if err != nil || got.Status != StatusCanceled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	// The run aborts the uploads it recorded before Cancel returns; one it was starting at that
	// moment (recorded just after) is aborted by the reaper, which aborts the uploads of every
	// finished transfer: within a few reap intervals, nothing is left.
	deadline := time.Now().Add(30 * time.Second)
	for n := multipartUploads(t, f.b, f.b.Bucket()); n != 0; n = multipartUploads(t, f.b, f.b.Bucket()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d incomplete multipart uploads left 30 s after cancel", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := f.b.Stat(context.Background(), "/big.bin"); err == nil {
		t.Fatal("the object exists after cancel")
	}
}

// putObject uploads local file src to p of b in parts of faultPart bytes.
func putObject(t testing.TB, b storage.Backend, p, src string) {
	t.Helper()
	content, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	up, err := b.Create(t.Context(), p, storage.UploadOptions{Size: int64(len(content)), Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	for n, off := 1, 0; off < len(content); n, off = n+1, off+faultPart {
		part := content[off:min(off+faultPart, len(content))]
		if err := up.WritePart(t.Context(), n, int64(off), bytes.NewReader(part), int64(len(part)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := up.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestObjectSourceOverwritten: another principal overwrites the source object while it is
// read; the change is noticed (its ETag) and the file starts again, so the destination is the
// new version whole, never a mix of both.
func TestObjectSourceOverwritten(t *testing.T) {
	h := newHarness(t, testConfig())
	d := sshtest.New(t, sshtest.Options{})
	srv := s3test.New(t)
	p, err := wanem.New(wanem.Config{Upstream: strings.TrimPrefix(srv.Endpoint, "http://"), Rate: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	direct := bucket(t, srv, "")
	slow, err := s3store.New(s3store.Config{Endpoint: "http://" + p.Addr().String(), Bucket: direct.Bucket(), PathStyle: true,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	h.sys.addStorage("alice", "s", slow)
	h.sys.add("alice", "d", d, "")
	local := t.TempDir()
	randomFile(t, filepath.Join(local, "v1"), 8*faultPart, 1)
	v2 := randomFile(t, filepath.Join(local, "v2"), 8*faultPart, 2)
	putObject(t, direct, "/obj", filepath.Join(local, "v1"))
	dstDir := d.MkTemp(t)
	tr := h.submit("alice", Request{Source: Endpoint{System: "s", Path: "/obj"}, Destination: Endpoint{System: "d", Path: filepath.Join(dstDir, "obj")},
		ChunkSize: faultPart, Streams: 2})
	h.wait("alice", tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= faultPart })
	putObject(t, direct, "/obj", filepath.Join(local, "v2"))
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded {
		t.Fatalf("status %s: %s", tr.Status, tr.Error)
	}
	if got := fileSHA(t, filepath.Join(dstDir, "obj")); got != v2 {
		t.Fatalf("destination sha256 %s, want the new version's %s", got, v2)
	}
	if items, _ := h.eng.Items(t.Context(), "alice", tr.ID, -1, 0, ""); items[0].SHA256 != v2 {
		t.Fatalf("item %+v", items[0])
	}
	if tr.BytesRead <= tr.BytesTotal {
		t.Fatalf("read %d bytes for %d: the file did not start again", tr.BytesRead, tr.BytesTotal)
	}
	if left := temps(t, dstDir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestObjectSSHDRestart: the SFTP source's sshd dies mid-transfer (every connection with it)
// and comes back; the run reopens its channels and finishes verified, without resending the
// parts the bucket already has.
func TestObjectSSHDRestart(t *testing.T) {
	f := startObjectFault(t, 8, 16<<20, "")
	f.h.wait("alice", f.tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= 2*faultPart })
	f.a.Kill()
	if err := f.a.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.succeeded(t)
	total := 0
	for n := 1; n <= 9; n++ {
		total += f.proxy.count(strconv.Itoa(n))
	}
	if total > 9+2 {
		t.Fatalf("%d part uploads for 9 parts", total)
	}
}

// TestObjectReaperAbortsLeftUpload: a transfer canceled while the object server is down cannot
// abort its multipart upload; the upload stays recorded and the engine's reaper aborts it once
// the server is back. A multipart upload the engine did not start is left alone.
func TestObjectReaperAbortsLeftUpload(t *testing.T) {
	f := startObjectFault(t, 8, 16<<20, "")
	theirs, err := f.b.Create(t.Context(), "/theirs.bin", storage.UploadOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.ID(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.h.wait("alice", f.tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= faultPart })
	f.srv.Kill()
	if got, err := f.h.eng.Cancel(t.Context(), "alice", f.tr.ID); err != nil || got.Status != StatusCanceled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	ups, err := f.h.eng.db.uploads(t.Context(), f.tr.ID)
	if err != nil || len(ups) != 1 {
		t.Fatalf("uploads recorded after a cancel with the server down: %+v %v", ups, err)
	}
	if err := f.srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The reaper aborts the upload, then forgets its record: wait for both.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ups, err := f.h.eng.db.uploads(t.Context(), f.tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		left := multipartUploads(t, f.b, f.b.Bucket())
		if left == 1 && len(ups) == 0 { // only theirs
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reaper left %d multipart uploads and %d records", left, len(ups))
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := f.b.Client().ListMultipartUploads(t.Context(), &awss3.ListMultipartUploadsInput{Bucket: aws.String(f.b.Bucket())})
	if err != nil || len(out.Uploads) != 1 || aws.ToString(out.Uploads[0].Key) != "theirs.bin" {
		t.Fatalf("multipart uploads left: %+v %v; want only the user's own", out, err)
	}
	if err := theirs.Abort(t.Context()); err != nil {
		t.Fatal(err)
	}
}
