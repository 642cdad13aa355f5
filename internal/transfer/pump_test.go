package transfer

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestStreamPipelineSpansRanges copies a file of many small ranges over streams that each take
// several, and checks that it arrives intact and that streams began ranges while the previous
// range's blocks were still in flight (the pipeline did not drain at range boundaries: with 16
// blocks in flight and 5 blocks per range, a stream that waited for each range's last write
// before reading the next would never overlap two).
func TestStreamPipelineSpansRanges(t *testing.T) {
	for _, streams := range []int{1, 3} {
		t.Run(map[int]string{1: "one stream", 3: "three streams"}[streams], func(t *testing.T) {
			h := newHarness(t, testConfig())
			a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
			h.sys.add("alice", "a", a, "")
			h.sys.add("alice", "b", b, "")
			srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
			const size = 24<<20 + 12345 // 25 ranges of 1 MiB, the last one short
			want := randomFile(t, filepath.Join(srcDir, "f.bin"), size, 7)
			tr := h.submit("alice", Request{
				Source:      Endpoint{System: "a", Path: filepath.Join(srcDir, "f.bin")},
				Destination: Endpoint{System: "b", Path: filepath.Join(dstDir, "f.bin")},
				Streams:     streams, ChunkSize: MinChunkSize,
			})
			tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
			if tr.Status != StatusSucceeded {
				t.Fatalf("status %s: %s", tr.Status, tr.Error)
			}
			if got := fileSHA(t, filepath.Join(dstDir, "f.bin")); got != want {
				t.Fatalf("destination sha256 %s, want %s", got, want)
			}
			if tr.BytesDone != size || tr.BytesRead != size {
				t.Fatalf("progress %+v", tr)
			}
			if n := testutil.ToFloat64(h.eng.metrics.overlapped); n == 0 {
				t.Fatalf("no range began while the previous one's blocks were in flight")
			}
		})
	}
}
