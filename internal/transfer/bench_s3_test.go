package transfer

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// BenchmarkTransferS3 moves 256 MiB from an sshd to versitygw (SFTP→S3) and back (S3→SFTP) on
// loopback, with sha256 verification (the source's sha256sum, the in-order hash, the composite
// checksum, the destination's sha256sum) and without, beside the same file SFTP→SFTP between
// two names of the same sshd (the baseline of the same run). Each iteration is one transfer
// (run with -benchtime 1x):
//
//	go test -run '^$' -bench TransferS3 -benchtime 1x -timeout 30m ./internal/transfer/
//
// MiB/s is submit-to-succeeded.
func BenchmarkTransferS3(b *testing.B) {
	const size = 256 << 20
	a := sshtest.New(b, sshtest.Options{})
	srv := s3test.New(b)
	bk := bucket(b, srv, "")
	dir := a.MkTemp(b)
	src := filepath.Join(dir, "big.bin")
	want := randomFile(b, src, size, 9)
	putObject(b, bk, "/big.bin", src) // for the S3 sources, whichever cases run
	syscall.Sync()
	cases := []struct {
		name    string
		toS3    bool
		streams int
		verify  Verify
		sftp    bool
	}{
		{"sftp-to-sftp-baseline", false, 4, "", true},
		{"sftp-to-s3", true, 0, "", false},
		{"sftp-to-s3-8-streams", true, 8, "", false},
		{"sftp-to-s3-verify=none", true, 0, VerifyNone, false},
		{"s3-to-sftp", false, 0, "", false},
		{"s3-to-sftp-verify=none", false, 0, VerifyNone, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				h := newHarness(b, Config{PollInterval: 50 * time.Millisecond})
				h.sys.add("u", "a", a, "")
				h.sys.add("u", "a2", a, "")
				h.sys.addStorage("u", "s", bk)
				req := Request{Source: Endpoint{System: "a", Path: src}, Destination: Endpoint{System: "s", Path: "/big.bin"},
					Streams: c.streams, Verify: c.verify}
				dst := filepath.Join(dir, "back.bin")
				switch {
				case c.sftp:
					_ = os.Remove(dst)
					req.Destination = Endpoint{System: "a2", Path: dst}
				case !c.toS3:
					_ = os.Remove(dst)
					req.Source, req.Destination = Endpoint{System: "s", Path: "/big.bin"}, Endpoint{System: "a", Path: dst}
				}
				start := time.Now()
				tr := h.submit("u", req)
				tr = h.wait("u", tr.ID, 10*time.Minute, nil)
				el := time.Since(start)
				if tr.Status != StatusSucceeded {
					b.Fatalf("transfer %s: %s", tr.Status, tr.Error)
				}
				b.ReportMetric(float64(size)/(1<<20)/el.Seconds(), "MiB/s")
				b.ReportMetric(float64(tr.Streams), "streams")
				got := ""
				if c.toS3 {
					got = objectSHA(b, bk, "/big.bin")
				} else {
					got = fileSHA(b, dst)
				}
				if got != want {
					b.Fatalf("destination sha256 %s, want %s", got, want)
				}
			}
		})
	}
}

// BenchmarkTransferS3SmallFiles moves a tree of 1,000 files of 4 KiB SFTP→S3 and back on
// loopback, beside the same tree SFTP→SFTP, and reports files/s: the per-file cost of an object
// transfer (requests, records, the source's or destination's sha256sum).
//
//	go test -run '^$' -bench TransferS3SmallFiles -benchtime 1x -timeout 30m ./internal/transfer/
func BenchmarkTransferS3SmallFiles(b *testing.B) {
	const files = 1000
	a := sshtest.New(b, sshtest.Options{})
	srv := s3test.New(b)
	bk := bucket(b, srv, "")
	dir := a.MkTemp(b)
	root := filepath.Join(dir, "tree")
	for i := range files {
		sub := filepath.Join(root, fmt.Sprintf("d%02d", i%10))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		randomFile(b, filepath.Join(sub, fmt.Sprintf("f%04d", i)), 4096, uint64(i))
	}
	cases := []struct {
		name     string
		src, dst Endpoint
		verify   Verify
	}{
		{"sftp-to-sftp-baseline", Endpoint{System: "a", Path: root}, Endpoint{System: "a2", Path: filepath.Join(dir, "copy")}, ""},
		{"sftp-to-s3", Endpoint{System: "a", Path: root}, Endpoint{System: "s", Path: "/tree"}, ""},
		{"sftp-to-s3-verify=size", Endpoint{System: "a", Path: root}, Endpoint{System: "s", Path: "/tree2"}, VerifySize},
		{"s3-to-sftp", Endpoint{System: "s", Path: "/tree"}, Endpoint{System: "a", Path: filepath.Join(dir, "back")}, ""},
		{"s3-to-sftp-verify=size", Endpoint{System: "s", Path: "/tree"}, Endpoint{System: "a", Path: filepath.Join(dir, "back2")}, VerifySize},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				_ = os.RemoveAll(c.dst.Path)
				h := newHarness(b, Config{PollInterval: 50 * time.Millisecond})
				h.sys.add("u", "a", a, "")
				h.sys.add("u", "a2", a, "")
				h.sys.addStorage("u", "s", bk)
				start := time.Now()
				tr := h.submit("u", Request{Source: c.src, Destination: c.dst, Recursive: true, Verify: c.verify})
				tr = h.wait("u", tr.ID, 10*time.Minute, nil)
				if tr.Status != StatusSucceeded || tr.FilesDone != files {
					b.Fatalf("transfer %s: %d files done: %s", tr.Status, tr.FilesDone, tr.Error)
				}
				b.ReportMetric(files/time.Since(start).Seconds(), "files/s")
			}
		})
	}
}
