package transfer

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// BenchmarkTransferCPU moves 1 GiB between two sshd processes with the automatic stream count
// and reports throughput and CPU seconds per GiB of this process (the engine and its pool) and
// of the sshd process trees (sshd, sftp-server, the checksum tools). The long path is `sshapi
// wanem` run as separate processes (binary in $SSHAPI_WANEM), so its CPU is not counted as
// sshapi's; it is reported as wanem-cpu-s/GiB. Environment:
//
//	SSHAPI_WANEM=/path/to/sshapi   run the wan case (skipped without it)
//	S2S_PACKET=261120              SFTP packet size of the pool (default: the pool's)
//	S2S_PROFILE=dir                write a CPU profile of each transfer into dir
//	S2S_TRACE=1                    print the transfer's progress every 20 ms
//
//	go test -run '^$' -bench TransferCPU -benchtime 1x -timeout 30m ./internal/transfer/
func BenchmarkTransferCPU(b *testing.B) {
	const size = 1 << 30
	for _, path := range []struct {
		name string
		wan  bool
	}{{"loopback", false}, {"wan-1gbit-50ms", true}} {
		b.Run(path.name, func(b *testing.B) {
			wanBin := os.Getenv("SSHAPI_WANEM")
			if path.wan && wanBin == "" {
				b.Skip("SSHAPI_WANEM unset")
			}
			a, d := sshtest.New(b, sshtest.Options{}), sshtest.New(b, sshtest.Options{})
			addrA, addrD := a.Addr, d.Addr
			var wanPIDs []int
			if path.wan {
				var pa, pd int
				addrA, pa = wanemProcess(b, wanBin, a.Addr)
				addrD, pd = wanemProcess(b, wanBin, d.Addr)
				wanPIDs = []int{pa, pd}
			}
			srcDir, dstDir := a.MkTemp(b), d.MkTemp(b)
			src := filepath.Join(srcDir, "big.bin")
			want := randomFile(b, src, size, 7)
			syscall.Sync()
			sshd := []int{sshdPID(b, a), sshdPID(b, d)}
			for range b.N {
				dst := filepath.Join(dstDir, "big.bin")
				_ = os.Remove(dst)
				if dir := os.Getenv("S2S_PROFILE"); dir != "" {
					f, err := os.Create(filepath.Join(dir, path.name+".pprof"))
					if err != nil {
						b.Fatal(err)
					}
					_ = pprof.StartCPUProfile(f)
					defer f.Close()
				}
				// Timing and CPU start at the submission: the engine's setup is not the transfer.
				h := newHarness(b, Config{PollInterval: 50 * time.Millisecond})
				h.sys.add("u", "a", a, addrA)
				h.sys.add("u", "d", d, addrD)
				self0 := selfCPU()
				sshdM, wanM := startTreeMeter(sshd), startTreeMeter(wanPIDs)
				start := time.Now()
				var took time.Duration // submission to finish, by the transfer's own clock
				tr, _, err := h.eng.Submit(b.Context(), "u", Request{Source: Endpoint{System: "a", Path: src}, Destination: Endpoint{System: "d", Path: dst}})
				if err != nil {
					b.Fatal(err)
				}
				for {
					cur, err := h.eng.Get(b.Context(), "u", tr.ID)
					if err != nil {
						b.Fatal(err)
					}
					if os.Getenv("S2S_TRACE") != "" { // progress on stderr
						fmt.Fprintf(os.Stderr, "TRACE %6.2fs %s read=%d done=%d\n", time.Since(start).Seconds(), cur.Status, cur.BytesRead, cur.BytesDone)
					}
					if cur.Status.Terminal() {
						if cur.Status != StatusSucceeded {
							b.Fatalf("transfer %s: %s", cur.Status, cur.Error)
						}
						b.ReportMetric(float64(cur.Streams), "streams")
						took = cur.FinishedAt.Sub(cur.CreatedAt)
						break
					}
					// Polling costs this process CPU (a database query); the duration comes from
					// the transfer's own timestamps, so a coarse poll loses no precision.
					time.Sleep(200 * time.Millisecond)
				}
				el := took
				selfS, sshdS, wanS := selfCPU()-self0, sshdM.stop(), wanM.stop()
				pprof.StopCPUProfile()
				b.ReportMetric(float64(size)/1e6/el.Seconds(), "MB/s")
				b.ReportMetric(selfS, "sshapi-cpu-s/GiB")
				b.ReportMetric(sshdS, "sshd-cpu-s/GiB")
				b.ReportMetric(wanS, "wanem-cpu-s/GiB")
				if got := fileSHA(b, dst); got != want {
					b.Fatalf("destination sha256 %s, want %s", got, want)
				}
			}
		})
	}
}

func init() {
	if v, err := strconv.Atoi(os.Getenv("S2S_PACKET")); err == nil {
		testPoolConfig.SFTPMaxPacket = v
	}
}

func wanemProcess(b *testing.B, bin, upstream string) (string, int) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "wanem", "--listen", addr, "--upstream", upstream, "--rtt", "50ms", "--rate", "1gbit")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if i > 100 {
			b.Fatal("wanem did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, cmd.Process.Pid
}

func sshdPID(b *testing.B, s *sshtest.Server) int {
	raw, err := os.ReadFile(filepath.Join(s.Dir, "sshd.pid"))
	if err != nil {
		b.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		b.Fatal(err)
	}
	return pid
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// treeMeter measures the CPU time of the process trees below pids between its start and stop.
// It reads each living process's own and its reaped children's time (utime, stime, cutime,
// cstime) at both ends only: a process that ended in between was reaped by its parent in the
// tree, whose children's time then holds it, so short-lived processes (a dd per range, an
// openssl per file) are counted and no sampling loop competes with the transfer for CPU.
type treeMeter struct {
	pids []int
	base float64
}

func startTreeMeter(pids []int) *treeMeter {
	return &treeMeter{pids: pids, base: treeTicks(pids)}
}

// stop returns the CPU seconds the trees used since start.
func (m *treeMeter) stop() float64 {
	return max(treeTicks(m.pids)-m.base, 0) / 100
}

// treeTicks sums utime, stime, cutime and cstime of the processes in the trees below pids
// (roots included), walking /proc/<pid>/task/<pid>/children rather than all of /proc.
func treeTicks(pids []int) float64 {
	var sum float64
	var walk func(p int)
	walk = func(p int) {
		id := strconv.Itoa(p)
		st, err := os.ReadFile("/proc/" + id + "/stat")
		if err != nil {
			return
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) < 15 {
			return
		}
		for _, v := range f[11:15] { // utime stime cutime cstime
			t, _ := strconv.ParseFloat(v, 64)
			sum += t
		}
		kids, _ := os.ReadFile("/proc/" + id + "/task/" + id + "/children")
		for _, k := range strings.Fields(string(kids)) {
			if c, err := strconv.Atoi(k); err == nil {
				walk(c)
			}
		}
	}
	for _, p := range pids {
		walk(p)
	}
	return sum
}
