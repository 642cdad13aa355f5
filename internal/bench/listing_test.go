package bench

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStreamsChannels(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"1,2,4,8,auto", []int{1, 2, 4, 8, 0}, false},
		{" auto , 3 ", []int{0, 3}, false},
		{"", nil, false},
		{"0", nil, true},
		{"65", nil, true},
		{"two", nil, true},
	} {
		got, err := ParseStreams(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("ParseStreams(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestPercentile(t *testing.T) {
	vs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for q, want := range map[float64]float64{50: 5, 90: 9, 99: 10, 100: 10, 1: 1} {
		if got := percentile(vs, q); got != want {
			t.Errorf("p%g = %g, want %g", q, got, want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("empty percentile")
	}
}

// TestChannelTables renders the channels scenarios: their own table per path with the share of
// the link and the ratio to sftp, not mixed into the transfer table, and a figure.
func TestChannelTables(t *testing.T) {
	const path = "1 Gbit/s × 50ms RTT (wanem)"
	run := func(scenario, target string, asked, used int, mbps float64) TransferRun {
		return TransferRun{Path: path, Scenario: scenario, Target: target, Streams: asked, StreamsUsed: used, Bytes: 1e8, Seconds: 1e2 / mbps, MBps: mbps, LinkMBps: 125}
	}
	rep := &TransferReport{Runs: []TransferRun{
		run(TransferUploadChannels, BaselineTarget, 1, 1, 40), run(TransferDownloadChannels, BaselineTarget, 1, 1, 40),
		run(TransferUploadChannels, BaselineTarget, 4, 4, 100), run(TransferDownloadChannels, BaselineTarget, 4, 4, 110),
		run(TransferUploadChannels, BaselineTarget, 0, 8, 100), run(TransferDownloadChannels, BaselineTarget, 0, 8, 115),
		run(TransferUploadChannels, PeerSFTP, 1, 1, 50), run(TransferDownloadChannels, PeerSFTP, 1, 1, 40),
	}}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	containsAll(t, md.String(),
		"#### Downloads and uploads through the API per SFTP channel count: "+path,
		"| download (GET …/content) | sshapi | 4 | 110.0 | 88% | 0.91 | 0.00 | – | 2.75× |",
		"| download (GET …/content) | sshapi | auto → 8 | 115.0 | 92% |",
		"| upload (PUT …/content) | sshapi | 1 | 40.0 | 32% | 2.50 | 0.00 | – | 0.80× |",
		"| upload (PUT …/content) | openssh-sftp | 1 | 50.0 | 40% |")
	if strings.Contains(md.String(), "#### Transfers:") {
		t.Errorf("channel runs leaked into the transfer table:\n%s", md.String())
	}
	dir := t.TempDir()
	names, err := rep.WritePlots(dir)
	if err != nil || !slices.Equal(names, []string{"transfer-channels.png"}) {
		t.Fatalf("plots %v, %v", names, err)
	}
	if st, err := os.Stat(filepath.Join(dir, names[0])); err != nil || st.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
}

// TestWarmUploadRow: the emulated path's table shows the upload from a cold and from a warm
// pool as rows of their own, each compared with sftp put.
func TestWarmUploadRow(t *testing.T) {
	const path = "1 Gbit/s × 50ms RTT (wanem)"
	run := func(target, pool string, mbps float64) TransferRun {
		return TransferRun{Path: path, Scenario: TransferUpload, Target: target, Streams: 1, StreamsUsed: 1, Bytes: 1e8, Seconds: 1e2 / mbps, MBps: mbps, Pool: pool}
	}
	rep := &TransferReport{Runs: []TransferRun{run(BaselineTarget, PoolCold, 70), run(BaselineTarget, PoolWarm, 90), run(PeerSFTP, "", 50)}}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	containsAll(t, md.String(),
		"| upload (cold pool) | sshapi | 1 | 70.0 | 1.43 |",
		"| upload (warm pool) | sshapi | 1 | 90.0 | 1.11 |",
		"| 1.80× |",
		"| upload | openssh-sftp | 1 | 50.0 |")
}

func TestListingTable(t *testing.T) {
	rep := &ListingReport{Runs: []ListingRun{
		{Target: BaselineTarget, Entries: 10000, Concurrency: 1, Listings: 40, PerSecond: 10, P50: 90, P90: 120, P99: 150, CPUMs: 40, SSHDCPUMs: 30},
		{Target: PeerMuxFind, Entries: 10000, Concurrency: 1, Listings: 40, PerSecond: 5, P50: 200, P90: 300, P99: 400, CPUMs: 20},
		{Target: BaselineTarget, Entries: 10000, Concurrency: 50, Listings: 200, PerSecond: 20, P50: 2000, P90: 2500, P99: 3000, CPUMs: 30, SSHDCPUMs: 25},
		{Target: PeerMuxLsLa, Entries: 10000, Concurrency: 50, Listings: 200, Failed: 200, Error: "ssh: session refused | x"},
	}}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	containsAll(t, md.String(),
		"#### Listing a directory of 10000 entries, 1 at a time",
		"| sshapi | 40 | 0 | 10.0 | 90.0 | 120 | 150 | 40.0 | 30.0 | 1.00× |",
		"| openssh-mux find -printf | 40 | 0 | 5.0 | 200 | 300 | 400 | 20.0 | – | 0.50× |",
		"#### Listing a directory of 10000 entries, 50 at a time",
		"| openssh-mux ls -la | 200 | 200: ssh: session refused / x | 0.0 | – | – | – | 0.0 | – | – |")
}

func containsAll(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("lacks %q:\n%s", want, text)
		}
	}
}

// meteredScript is a shell script whose first line waits for stdin, its process tree under a
// cpuMeter.
type meteredScript struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	m     *cpuMeter
}

// startMetered starts script under sh, starts a meter on its tree and tells the script to go.
func startMetered(t *testing.T, script string) *meteredScript {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &meteredScript{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), m: startCPUMeter([]int{cmd.Process.Pid})}
	_, _ = stdin.Write([]byte("go\n"))
	return s
}

// line reads the script's next line of output.
func (s *meteredScript) line(t *testing.T) string {
	t.Helper()
	l, err := s.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(l)
}

// finish stops the meter, lets the script end and returns what the meter measured and the CPU
// the script and the children it waited for used.
func (s *meteredScript) finish(t *testing.T) (metered, waited float64) {
	t.Helper()
	metered = s.m.Stop()
	_ = s.stdin.Close()
	if err := s.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return metered, s.cmd.ProcessState.UserTime().Seconds() + s.cmd.ProcessState.SystemTime().Seconds()
}

// TestCPUMeterCountsShortChildren: a shell runs many commands each far shorter than the meter's
// 100 ms sampling; their CPU reaches the meter through the shell's waited-for children's time.
func TestCPUMeterCountsShortChildren(t *testing.T) {
	s := startMetered(t, `read x; for i in $(seq 30); do sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'; done; echo done; read x || true`)
	s.line(t) // the children are done
	got, want := s.finish(t)
	if want < 0.05 {
		t.Fatalf("the children used only %.2fs CPU: make them work longer", want)
	}
	if got < want/2 || got > want*1.5+0.05 {
		t.Errorf("meter %.2fs, children and shell used %.2fs", got, want)
	}
}

// TestCPUMeterCountsGrandchildOnce: a command running for several of the old 100 ms samples whose
// parent ends just after it (as a session's tar or sftp-server ends with its session) is counted
// once. Adding what was seen of it to its grandparent's waited-for children's time, which
// holds it in full, counted it twice.
func TestCPUMeterCountsGrandchildOnce(t *testing.T) {
	tests := []struct{ name, script string }{
		{"grandchild", `read x; sh -c 'sh -c "i=0; while [ \$i -lt 400000 ]; do i=\$((i+1)); done"; true'; echo done; read x || true`},
		{"child", `read x; sh -c 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done'; echo done; read x || true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startMetered(t, tt.script)
			seen := map[int]bool{}
			stop, stopped := make(chan struct{}), make(chan struct{})
			go func() { // read the tree while the loop runs, as the old meter's samples did
				defer close(stopped)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					for p := range procTicks([]int{s.cmd.Process.Pid}) {
						seen[p] = true
					}
				}
			}()
			s.line(t) // the loop is over
			close(stop)
			<-stopped
			got, want := s.finish(t)
			if want < 0.1 {
				t.Fatalf("the loop used only %.2fs CPU: make it longer", want)
			}
			if len(seen) < 2 {
				t.Fatalf("the loop was never seen running (%d processes seen)", len(seen))
			}
			if got < want*0.8 || got > want*1.2+0.02 {
				t.Errorf("meter %.2fs, the tree used %.2fs", got, want)
			}
		})
	}
}

// TestCPUMeterCountsUnaccountedChild: a child whose parent ignores SIGCHLD is reaped by the
// kernel without reaching anyone's waited-for children's time (as a non-root OpenSSH session's
// post-auth child never reaches the listener's), so what the samples saw of it is counted.
func TestCPUMeterCountsUnaccountedChild(t *testing.T) {
	const script = `read x; python3 -c '
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
pid = os.fork()
if pid == 0:
    t0 = time.process_time()
    while time.process_time() - t0 < 1.0:
        pass
    c = os.times()
    print(c.user + c.system, flush=True)
    os._exit(0)
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(0.01)
'; echo done; read x || true`
	s := startMetered(t, script)
	line := s.line(t) // the child's own CPU seconds, as it ends
	child, err := strconv.ParseFloat(line, 64)
	if err != nil {
		t.Fatalf("child's CPU %q: %v", line, err)
	}
	s.line(t) // done: the child is gone
	got, accounted := s.finish(t)
	if accounted > child/2 {
		t.Fatalf("the shell's waited-for time %.2fs holds the child's %.2fs: SIGCHLD was not ignored", accounted, child)
	}
	if got < child*0.8 || got > (child+accounted)*1.2+0.05 {
		t.Errorf("meter %.2fs; the child used %.2fs, the rest of the tree %.2fs", got, child, accounted)
	}
}

// TestProcTicksWalkFindsTree: walking the children files finds the same processes of a tree
// (a shell, its children and a grandchild) as scanning all of /proc, and nothing outside it.
func TestProcTicksWalkFindsTree(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sleep 30 & sh -c 'sleep 30 & wait' & echo up; wait`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	root := []int{cmd.Process.Pid}
	var walk, scan map[int]procTime
	for range 50 { // until the grandchild has started
		var ok bool
		if walk, ok = procTicksWalk(root); !ok {
			t.Skip("no /proc/PID/task/TID/children on this kernel")
		}
		if scan = procTicksScan(root); len(scan) >= 4 && len(walk) == len(scan) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(scan) < 4 {
		t.Fatalf("scan found %d processes of the tree, want 4", len(scan))
	}
	for p := range scan {
		if _, ok := walk[p]; !ok {
			t.Errorf("walk missed %d", p)
		}
	}
	if len(walk) != len(scan) {
		t.Errorf("walk found %d processes, scan %d", len(walk), len(scan))
	}
}

// TestCPUMeterOwn: the meter measures what its own sampling cost (reading the trees' processes
// takes CPU of its thread), and that is part of the process's CPU, so callers can take it off.
func TestCPUMeterOwn(t *testing.T) {
	cmd := exec.Command("sh", "-c", `for i in $(seq 20); do sleep 30 & done; echo up; wait`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = exec.Command("pkill", "-P", strconv.Itoa(cmd.Process.Pid)).Run()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	own0, _ := splitCPU()
	m := startCPUMeter([]int{cmd.Process.Pid})
	if got := len(procTicks([]int{cmd.Process.Pid})); got < 2 {
		t.Fatalf("the tree has %d processes", got)
	}
	m.Stop()
	own1, _ := splitCPU()
	if m.Own() <= 0 {
		t.Fatalf("meter's own CPU %.6fs, want > 0 (it read the tree at least twice)", m.Own())
	}
	if m.Own() > own1-own0+0.01 { // rusage counts in µs, the thread clock in ns
		t.Errorf("meter's own CPU %.6fs exceeds the process's %.6fs", m.Own(), own1-own0)
	}
	var none *cpuMeter
	if none.Own() != 0 {
		t.Error("a nil meter took CPU")
	}
}
