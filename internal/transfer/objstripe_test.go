package transfer

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/storage"
)

// stripeWatch records what the object mover reports about files written to SSH systems.
type stripeWatch struct {
	mu       sync.Mutex
	finished map[string][2]string // destination → channels, how it was verified
	channels map[string]int
	writes   int // parts written
	corrupt  func(tmp string, p storage.Part)
}

// watchStripes sets the object mover's test hooks for the test's duration.
func watchStripes(t *testing.T) *stripeWatch {
	t.Helper()
	w := &stripeWatch{finished: map[string][2]string{}, channels: map[string]int{}}
	objectObserver = func(dst string, channels int, verifiedBy string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.channels[dst] = channels
		w.finished[dst] = [2]string{dst, verifiedBy}
	}
	objectPartWritten = func(tmp string, p storage.Part) {
		w.mu.Lock()
		w.writes++
		corrupt := w.corrupt
		w.mu.Unlock()
		if corrupt != nil {
			corrupt(tmp, p)
		}
	}
	t.Cleanup(func() { objectObserver, objectPartWritten = nil, nil })
	return w
}

// s3ToSFTP puts a file of size bytes into a fresh bucket and returns the harness, the SSH
// destination, its directory and the file's sha256; the bucket is system "s", the sshd "d"
// (reached at addr when not empty).
func s3ToSFTP(t *testing.T, size int64, slow int64) (*harness, *sshtest.Server, string, string) {
	t.Helper()
	h := newHarness(t, testConfig())
	d := sshtest.New(t, sshtest.Options{})
	srv := s3test.New(t)
	b := bucket(t, srv, "")
	h.sys.addStorage("alice", "s", b)
	addr := ""
	if slow > 0 {
		addr = slowProxy(t, d, slow)
	}
	h.sys.add("alice", "d", d, addr)
	local := t.TempDir()
	want := randomFile(t, filepath.Join(local, "f"), size, 7)
	putObject(t, b, "/f.bin", filepath.Join(local, "f"))
	return h, d, d.MkTemp(t), want
}

// TestObjectStripedDestination: a file of several parts from a bucket to an SSH system is
// written over all the run's SFTP channels, and its destination SHA-256 is streamed while the
// parts land rather than read again after the commit; the file is right and nothing is left.
func TestObjectStripedDestination(t *testing.T) {
	w := watchStripes(t)
	h, _, dir, want := s3ToSFTP(t, 7*faultPart+999, 0)
	dst := filepath.Join(dir, "f.bin")
	tr := h.submit("alice", Request{Source: Endpoint{System: "s", Path: "/f.bin"}, Destination: Endpoint{System: "d", Path: dst},
		ChunkSize: faultPart, Streams: 3})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded {
		t.Fatalf("status %s: %s", tr.Status, tr.Error)
	}
	if got := fileSHA(t, dst); got != want {
		t.Fatalf("destination sha256 %s, want %s", got, want)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := w.channels[dst]; got != 3 {
		t.Fatalf("the parts went over %d SFTP channels, want 3", got)
	}
	if got := w.finished[dst][1]; got != "streamed" {
		t.Fatalf("the destination was verified by %q, want \"streamed\" (no second read)", got)
	}
	if left := temps(t, dir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestObjectDestinationCorruptDetected: one byte of a part is changed in the destination's
// temporary file after the part was written (as a bad disk or another writer would); the
// verification sees that the file is not the bytes sent, the file is not kept, and the next
// attempt writes it right.
func TestObjectDestinationCorruptDetected(t *testing.T) {
	w := watchStripes(t)
	var once sync.Once
	corrupted := false
	w.corrupt = func(tmp string, p storage.Part) {
		if p.Number != 2 {
			return
		}
		once.Do(func() {
			f, err := os.OpenFile(tmp, os.O_RDWR, 0)
			if err != nil {
				t.Errorf("open %s: %v", tmp, err)
				return
			}
			defer f.Close()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, p.Offset+4096); err != nil {
				t.Errorf("read: %v", err)
				return
			}
			b[0] ^= 0x20
			if _, err := f.WriteAt(b, p.Offset+4096); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			w.mu.Lock()
			corrupted = true
			w.mu.Unlock()
		})
	}
	h, _, dir, want := s3ToSFTP(t, 4*faultPart+5, 0)
	dst := filepath.Join(dir, "f.bin")
	tr := h.submit("alice", Request{Source: Endpoint{System: "s", Path: "/f.bin"}, Destination: Endpoint{System: "d", Path: dst},
		ChunkSize: faultPart, Streams: 2})
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded {
		t.Fatalf("status %s: %s", tr.Status, tr.Error)
	}
	if got := fileSHA(t, dst); got != want {
		t.Fatalf("destination sha256 %s, want %s", got, want)
	}
	items, err := h.eng.Items(t.Context(), "alice", tr.ID, -1, 0, "")
	if err != nil || len(items) != 1 {
		t.Fatalf("items %+v %v", items, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !corrupted {
		t.Fatal("the test did not corrupt the part")
	}
	if items[0].Attempts != 2 || items[0].SHA256 != want {
		t.Fatalf("item %+v: want 2 attempts (the corrupt file caught and written again) and sha256 %s", items[0], want)
	}
	if got := w.finished[dst][1]; got != "streamed" {
		t.Fatalf("the second attempt was verified by %q, want \"streamed\"", got)
	}
	if left := temps(t, dir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestObjectStripedDestinationSSHDRestart: the destination's sshd dies while parts are being
// written over several channels and comes back; the run reopens its channels, resumes the same
// temporary file (the parts recorded as finished are not written again) and finishes verified.
func TestObjectStripedDestinationSSHDRestart(t *testing.T) {
	w := watchStripes(t)
	h, d, dir, want := s3ToSFTP(t, 8*faultPart+4321, 16<<20)
	dst := filepath.Join(dir, "f.bin")
	tr := h.submit("alice", Request{Source: Endpoint{System: "s", Path: "/f.bin"}, Destination: Endpoint{System: "d", Path: dst},
		ChunkSize: faultPart, Streams: 3})
	h.wait("alice", tr.ID, time.Minute, func(tr *Transfer) bool { return tr.BytesDone >= 2*faultPart })
	d.Kill()
	if err := d.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
	if tr.Status != StatusSucceeded {
		t.Fatalf("status %s: %s", tr.Status, tr.Error)
	}
	if got := fileSHA(t, dst); got != want {
		t.Fatalf("destination sha256 %s, want %s", got, want)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writes > 9+3 { // at most the parts in flight when it died (three streams) again
		t.Fatalf("%d part writes for 9 parts: finished parts were written again", w.writes)
	}
	if left := temps(t, dir); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	t.Logf("%d part writes for 9 parts; %d retries", w.writes, tr.Retries)
}
