package transfer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/wanem"
)

// BenchmarkTransfer1GiB moves 1 GiB between two sshd processes, on plain loopback and through a
// wanem path of 1 Gbit/s and 50 ms RTT in front of each system, with one stream, a fixed four,
// and the automatic count, beside OpenSSH's `scp -3` through the same paths. "sshd-restart" kills
// and restarts the source's sshd half way and reports how many bytes the fault cost. Each
// iteration is one transfer (run with -benchtime 1x):
//
//	go test -run '^$' -bench Transfer1GiB -benchtime 1x -timeout 30m ./internal/transfer/
//
// MiB/s is submit-to-succeeded, sha256 verification of both ends included unless the name says
// verify=none.
func BenchmarkTransfer1GiB(b *testing.B) {
	const size = 1 << 30
	type bc struct {
		name    string
		streams int
		verify  Verify
		scp     bool
		fault   bool
	}
	cases := []bc{
		{name: "1-stream", streams: 1},
		{name: "4-streams", streams: 4},
		{name: "auto", streams: 0},
		{name: "auto-verify=none", streams: 0, verify: VerifyNone},
		{name: "1-stream-verify=none", streams: 1, verify: VerifyNone},
		{name: "auto-sshd-restart", streams: 0, fault: true},
		{name: "scp-3", scp: true},
	}
	for _, path := range []struct {
		name string
		rtt  time.Duration
		rate int64
	}{{"loopback", 0, 0}, {"wan-1gbit-50ms", 50 * time.Millisecond, 125_000_000}} {
		b.Run(path.name, func(b *testing.B) {
			a, d := sshtest.New(b, sshtest.Options{}), sshtest.New(b, sshtest.Options{})
			addrA, addrD := a.Addr, d.Addr
			if path.rtt > 0 {
				addrA, addrD = wanProxy(b, a.Addr, path.rtt, path.rate), wanProxy(b, d.Addr, path.rtt, path.rate)
			}
			srcDir, dstDir := a.MkTemp(b), d.MkTemp(b)
			src := filepath.Join(srcDir, "big.bin")
			want := randomFile(b, src, size, 7)
			syscall.Sync() // let writeback finish so the first case is not measured against it
			for _, c := range cases {
				if path.rtt > 0 && c.fault {
					continue
				}
				b.Run(c.name, func(b *testing.B) {
					for range b.N {
						dst := filepath.Join(dstDir, "big.bin")
						_ = os.Remove(dst)
						start := time.Now()
						if c.scp {
							scp3(b, a, d, addrA, addrD, src, dst)
						} else {
							tr := benchTransfer(b, a, d, addrA, addrD, src, dst, c.streams, c.verify, c.fault)
							b.ReportMetric(float64(tr.Streams), "streams")
							b.ReportMetric(float64(tr.BytesRead-size), "fault-bytes")
						}
						el := time.Since(start)
						b.ReportMetric(float64(size)/(1<<20)/el.Seconds(), "MiB/s")
						if got := fileSHA(b, dst); got != want {
							b.Fatalf("destination sha256 %s, want %s", got, want)
						}
					}
				})
			}
		})
	}
}

func wanProxy(b *testing.B, upstream string, rtt time.Duration, rate int64) string {
	p, err := wanem.New(wanem.Config{Upstream: upstream, RTT: rtt, Rate: rate})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Stop() })
	return p.Addr().String()
}

// benchTransfer runs one transfer on a fresh engine and returns its final state.
func benchTransfer(b *testing.B, a, d *sshtest.Server, addrA, addrD, src, dst string, streams int, verify Verify, fault bool) *Transfer {
	h := newHarness(b, Config{PollInterval: 50 * time.Millisecond})
	h.sys.add("u", "a", a, addrA)
	h.sys.add("u", "d", d, addrD)
	tr, _, err := h.eng.Submit(b.Context(), "u", Request{Source: Endpoint{System: "a", Path: src}, Destination: Endpoint{System: "d", Path: dst},
		Streams: streams, Verify: verify})
	if err != nil {
		b.Fatal(err)
	}
	faulted := !fault
	for {
		cur, err := h.eng.Get(b.Context(), "u", tr.ID)
		if err != nil {
			b.Fatal(err)
		}
		if cur.Status.Terminal() {
			if cur.Status != StatusSucceeded {
				b.Fatalf("transfer %s: %s", cur.Status, cur.Error)
			}
			return cur
		}
		if !faulted && cur.BytesDone >= cur.BytesTotal/2 && cur.BytesTotal > 0 {
			a.Kill()
			if err := a.Restart(b.Context()); err != nil {
				b.Fatal(err)
			}
			faulted = true
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scp3 copies src on a to dst on d through this host with OpenSSH's scp -3.
func scp3(b *testing.B, a, d *sshtest.Server, addrA, addrD, src, dst string) {
	dir := b.TempDir()
	ka, kd := filepath.Join(dir, "a"), filepath.Join(dir, "d")
	_ = os.WriteFile(ka, a.PrivateKeyPEM, 0o600)
	_ = os.WriteFile(kd, d.PrivateKeyPEM, 0o600)
	cmd := exec.Command("scp", "-3", "-q", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
		"-i", ka, "-i", kd,
		fmt.Sprintf("scp://%s@%s/%s", a.User, addrA, src), fmt.Sprintf("scp://%s@%s/%s", d.User, addrD, dst))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("scp -3: %v: %s", err, out)
	}
}
