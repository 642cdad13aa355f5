package files

import (
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// BenchmarkStripedDownload: the sshapi-side CPU of a download's SFTP reads, without HTTP: a
// 256 MiB file read over one SFTP channel (aes128-gcm@openssh.com, the pool's packet size and
// requests in flight) through a StripedReader with the API's two 1 MiB chunk buffers, its
// bytes handed to a discarding writer as the download handler hands them to the connection.
// It reports this process's CPU per GiB (user+system; sshd is another process) and its
// allocations. The garbage collector runs with the service's default heap floor
// (config.DefaultGCMinHeapBytes, 64 MiB), as in sshapi serve.
func BenchmarkStripedDownload(b *testing.B) {
	const size = 256 << 20
	dir := testServer.MkTemp(b)
	name := filepath.Join(dir, "big")
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(data)
	if err := os.WriteFile(name, data, 0o644); err != nil {
		b.Fatal(err)
	}
	data = nil
	c := benchSFTP(b)
	bufs := [][]byte{make([]byte, 1<<20), make([]byte, 1<<20)}
	defer debug.SetGCPercent(debug.SetGCPercent(heapFloorPercent(64 << 20)))
	b.SetBytes(size)
	b.ReportAllocs()
	cpu0, t0 := processCPU(), time.Now()
	for b.Loop() {
		f, err := c.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		sr := NewStripedReader([]io.ReaderAt{f}, size, bufs, StripeChunksPerChannel)
		n, err := sr.WriteNTo(discard{}, size)
		_ = sr.Close()
		_ = f.Close()
		if err != nil || n != size {
			b.Fatalf("read %d of %d: %v", n, size, err)
		}
	}
	gib := float64(b.N) * size / (1 << 30)
	b.ReportMetric((processCPU()-cpu0).Seconds()/gib, "cpu-s/GiB")
	b.ReportMetric(time.Since(t0).Seconds()/gib, "wall-s/GiB")
}

// BenchmarkStripedUpload: the sshapi-side CPU of an upload's SFTP writes, without HTTP: 256 MiB
// from a reader written over one SFTP channel (aes128-gcm@openssh.com, the pool's packet size and
// requests in flight) through a stripeWriter with the API's two 1 MiB chunk buffers, hashed on
// the way as Upload hashes it. It reports this process's CPU per GiB (user+system; sshd is
// another process) and its allocations, with the service's default heap floor.
func BenchmarkStripedUpload(b *testing.B) {
	const size = 256 << 20
	dir := testServer.MkTemp(b)
	name := filepath.Join(dir, "big")
	data := make([]byte, 1<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(data)
	c := benchSFTP(b)
	bufs := [][]byte{make([]byte, 1<<20), make([]byte, 1<<20)}
	defer debug.SetGCPercent(debug.SetGCPercent(heapFloorPercent(64 << 20)))
	b.SetBytes(size)
	b.ReportAllocs()
	cpu0, t0 := processCPU(), time.Now()
	for b.Loop() {
		f, err := c.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			b.Fatal(err)
		}
		w := newStripeWriter(bufs, StripeChunksPerChannel)
		w.add(f)
		n, err := w.copy(b.Context(), &repeatReader{data: data, left: size}, io.Discard)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil || n != size {
			b.Fatalf("wrote %d of %d: %v", n, size, err)
		}
	}
	gib := float64(b.N) * size / (1 << 30)
	b.ReportMetric((processCPU()-cpu0).Seconds()/gib, "cpu-s/GiB")
	b.ReportMetric(time.Since(t0).Seconds()/gib, "wall-s/GiB")
}

// repeatReader reads data over and over until left bytes are read, in reads of at most 32 KiB
// (what an HTTP body hands out).
type repeatReader struct {
	data []byte
	off  int
	left int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), 32<<10, int(r.left))]
	n := copy(p, r.data[r.off:])
	r.off = (r.off + n) % len(r.data)
	r.left -= int64(n)
	return n, nil
}

// discard drops what it is given, as io.Discard does, but without a ReadFrom.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapFloorPercent is the GOGC that makes the heap goal floor bytes for what is live after a
// collection now (at least 100), as the service's heap floor does.
func heapFloorPercent(floor uint64) int {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	live := s[0].Value.Uint64()
	if live == 0 || floor <= 2*live {
		return 100
	}
	return int((floor - live) * 100 / live)
}

// benchSFTP opens an SFTP client to the test server over one aes128-gcm@openssh.com connection
// with the options sshpool gives an OpenSSH server with limits@openssh.com; both close when b
// ends.
func benchSFTP(b *testing.B) *sftp.Client {
	cfg := testServer.ClientConfig()
	cfg.Ciphers = []string{"aes128-gcm@openssh.com"}
	conn, err := ssh.Dial("tcp", testServer.Addr, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	c, err := sftp.NewClient(conn, sftp.MaxPacketUnchecked(256<<10-1024), sftp.MaxConcurrentRequestsPerFile(8),
		sftp.UseConcurrentReads(true), sftp.UseConcurrentWrites(true))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}
