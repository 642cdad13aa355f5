package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sshapi/sshapi/internal/shell"
)

// Targets of the many-small-files bench beside sshapi.
const (
	// PeerTarPipe is `ssh src 'tar -cf - DIR' | ssh dst 'tar -xf -'`.
	PeerTarPipe = "openssh tar pipe"
	// PeerSCP3R is `scp -3 -r`.
	PeerSCP3R = "openssh-scp-3 -r"
)

// FilesRun is one copy of a directory tree of many small files from one system to another.
type FilesRun struct {
	// Target is sshapi or a peer; How says what ran; Round is the round it ran in (from 1, see
	// FilesBench.Rounds).
	Target string `json:"target"`
	Round  int    `json:"round,omitempty"`
	How    string `json:"how"`
	// Files of FileSize bytes each; Seconds from start to the copy being complete (for sshapi,
	// submit to `succeeded`); FilesPerSecond is Files / Seconds.
	Files          int     `json:"files"`
	FileSize       int64   `json:"file_size"`
	Seconds        float64 `json:"seconds"`
	FilesPerSecond float64 `json:"files_per_s"`
	MBps           float64 `json:"mb_per_s"`
	// Verified says what checked the copy during the run ("sha256 on both systems", "none").
	Verified string `json:"verified"`
	// FilesDone is what sshapi's transfer reported done; SameSystem whether sshapi saw the two
	// ends as one system (a server-side copy).
	FilesDone  int64 `json:"files_done,omitempty"`
	SameSystem bool  `json:"same_system,omitempty"`
	// RSSBeforeMiB and PeakRSSMiB are the bench process's resident set (it hosts sshapi) before
	// the run and at its highest during the run (sampled from /proc/self/status every 100 ms).
	RSSBeforeMiB float64 `json:"rss_before_mib,omitempty"`
	PeakRSSMiB   float64 `json:"peak_rss_mib,omitempty"`
	// CPUSeconds of the bench process and its waited-for children; SSHDCPUSeconds of the sshd
	// process tree.
	CPUSeconds     float64 `json:"cpu_s"`
	SSHDCPUSeconds float64 `json:"sshd_cpu_s,omitempty"`
	// Error is why the run failed, or why its copy did not match the source ("" if neither).
	Error string `json:"error,omitempty"`
}

// FilesReport is everything one many-small-files bench measured.
type FilesReport struct {
	Meta Meta       `json:"meta"`
	Runs []FilesRun `json:"runs"`
}

// FilesBench copies one directory tree from Src to Dst through sshapi's POST /v1/transfers and,
// with Peers, through an OpenSSH tar pipe and scp -3 -r.
type FilesBench struct {
	API      *API
	Src, Dst TransferEndpoint
	// SrcDir is the tree on Src (absolute); each target copies it to a directory of its own
	// named DstBase-<target> on Dst.
	SrcDir, DstBase string
	// Files and FileSize describe the tree, for the report.
	Files    int
	FileSize int64
	// Peers adds the OpenSSH runs; NoSCP leaves out scp -3 -r (the slowest) among them.
	Peers, NoSCP bool
	// Rounds is how many times sshapi and the tar pipe each copy the tree (at least 1), in ABBA
	// order: on this machine's disk the kernel's cost of creating a file varies several-fold
	// from one copy to the next (a file created in a directory of a block group that no file
	// used before cost about 620 µs of system time, 45-145 µs in one used before), so a single
	// pair of runs compares the disk's states as much as the two targets.
	Rounds int
	// Check checks a target's copy (the directory on Dst) against the source after its run;
	// Remove deletes every copy once all targets ran, never between runs: right after a deletion
	// of tens of thousands of files this machine's ext4 disk made the next copy spend seconds in
	// the kernel (a local tar pipe of 30,000 files of 4 KiB took 2.6 s, and 17.6 s, 15.3 s of
	// it system time, right after a tree of that size was deleted), which charged one target's
	// cleanup to the next. Either may be nil.
	Check, Remove func(dir string) error
	// SSHDPIDs are the sshd master processes whose CPU is reported.
	SSHDPIDs []int
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Profile, when set, is a file that receives a CPU profile of this process (which hosts
	// sshapi) during sshapi's run.
	Profile string
	// Report receives the runs.
	Report *FilesReport
}

// Run copies the tree through every target in turn, Rounds times for sshapi and the tar pipe
// (ABBA: sshapi then the tar pipe in odd rounds, the other way round in even ones) and once for
// scp -3 -r, last. A failed run is recorded with its error; Run returns only ctx's error.
func (b *FilesBench) Run(ctx context.Context) error {
	var copies []string
	dst := func(suffix string, round int) string {
		d := b.DstBase + "-" + suffix
		if round > 1 {
			d += "-" + strconv.Itoa(round)
		}
		copies = append(copies, d)
		return d
	}
	defer func() {
		if b.Remove != nil {
			for _, d := range copies {
				_ = b.Remove(d)
			}
		}
	}()
	runSSHAPI := func(round int) {
		b.measure(ctx, BaselineTarget, round, "`POST /v1/transfers` recursive, verify sha256", "sha256 on both systems", dst("sshapi", round), true,
			func(dir string, r *FilesRun) error {
				if b.Profile != "" && round == 1 {
					defer startCPUProfile(b.Profile)()
				}
				st, err := b.API.waitTransfer(ctx, map[string]any{
					"source":      map[string]string{"system": b.Src.System, "path": b.SrcDir},
					"destination": map[string]string{"system": b.Dst.System, "path": dir},
					"recursive":   true, "verify": "sha256"}, 100*time.Millisecond)
				r.FilesDone, r.SameSystem = st.FilesDone, st.SameSystem
				if err == nil && st.FilesDone != int64(b.Files) {
					err = fmt.Errorf("transfer reports %d files done, want %d", st.FilesDone, b.Files)
				}
				return err
			})
	}
	runTar := func(round int) {
		b.measure(ctx, PeerTarPipe, round, "`ssh src 'tar -cf - DIR' | ssh dst 'tar -xf -'`", "none", dst("tar", round), false,
			func(dir string, _ *FilesRun) error { return b.tarPipe(ctx, dir) })
	}
	for round := 1; round <= max(1, b.Rounds) && ctx.Err() == nil; round++ {
		first, second := runSSHAPI, runTar
		if round%2 == 0 {
			first, second = runTar, runSSHAPI
		}
		if !b.Peers {
			first, second = runSSHAPI, func(int) {}
		}
		first(round)
		if ctx.Err() != nil {
			break
		}
		second(round)
	}
	if ctx.Err() != nil || !b.Peers || b.NoSCP {
		return ctx.Err()
	}
	b.measure(ctx, PeerSCP3R, 1, "`scp -3 -r`", "none", dst("scp", 1), false,
		func(dir string, _ *FilesRun) error { return b.scp3r(ctx, dir) })
	return ctx.Err()
}

func (b *FilesBench) measure(ctx context.Context, target string, round int, how, verified, dir string, rss bool, fn func(dir string, r *FilesRun) error) {
	r := FilesRun{Target: target, Round: round, How: how, Files: b.Files, FileSize: b.FileSize, Verified: verified}
	var peak atomic.Int64
	stopRSS := func() {}
	if rss {
		before := selfRSS()
		r.RSSBeforeMiB = float64(before) / (1 << 20)
		peak.Store(before)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				if v := selfRSS(); v > peak.Load() {
					peak.Store(v)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		var once sync.Once
		stopRSS = func() { once.Do(func() { close(stop); <-done }) }
	}
	// Outside the measured time: write back the dirty pages the tree or the last target's copy
	// and removal left, so that no target pays for another's writes.
	syscall.Sync()
	cpu0 := selfCPU()
	var meter *cpuMeter
	if len(b.SSHDPIDs) > 0 {
		meter = startCPUMeter(b.SSHDPIDs)
	}
	start := time.Now()
	err := fn(dir, &r)
	r.Seconds = time.Since(start).Seconds()
	if meter != nil {
		r.SSHDCPUSeconds = meter.Stop()
	}
	r.CPUSeconds = selfCPU() - cpu0 - meter.Own()
	stopRSS()
	if rss {
		r.PeakRSSMiB = float64(peak.Load()) / (1 << 20)
	}
	if err == nil && b.Check != nil {
		if cerr := b.Check(dir); cerr != nil {
			err = fmt.Errorf("copy differs from the source: %w", cerr)
		}
	}
	if err != nil {
		r.Error = truncate(err.Error(), 300)
	} else if r.Seconds > 0 {
		r.FilesPerSecond = float64(b.Files) / r.Seconds
		r.MBps = float64(int64(b.Files)*b.FileSize) / 1e6 / r.Seconds
	}
	if b.Progress != nil {
		peakRSS := ""
		if rss {
			peakRSS = fmt.Sprintf(", peak rss %.0f MiB (%.0f before)", r.PeakRSSMiB, r.RSSBeforeMiB)
		}
		fmt.Fprintf(b.Progress, "small files %d × %d B %s (round %d): %.0f files/s in %.2fs, cpu %.2fs, sshd cpu %.2fs%s %s\n",
			b.Files, b.FileSize, target, round, r.FilesPerSecond, r.Seconds, r.CPUSeconds, r.SSHDCPUSeconds, peakRSS, r.Error)
	}
	b.Report.Runs = append(b.Report.Runs, r)
}

// selfRSS is this process's resident set in bytes (0 if unknown).
func selfRSS() int64 {
	s, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// tarPipe streams the source tree with tar from Src to Dst through this host: two ssh
// processes, one's stdout the other's stdin.
func (b *FilesBench) tarPipe(ctx context.Context, dir string) error {
	parent, name := path.Split(strings.TrimRight(b.SrcDir, "/"))
	src := exec.CommandContext(ctx, "ssh", b.Src.SSH.sshArgs("-T", b.Src.SSH.Host, "tar -C "+shell.Quote(parent)+" -cf - "+shell.Quote(name))...)
	dst := exec.CommandContext(ctx, "ssh", b.Dst.SSH.sshArgs("-T", b.Dst.SSH.Host,
		"mkdir "+shell.Quote(dir)+" && tar -C "+shell.Quote(dir)+" --strip-components=1 -xf -")...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("tar pipe: %w", err)
	}
	var srcErr, dstErr strings.Builder
	src.Stdout, src.Stderr = pw, &srcErr
	dst.Stdin, dst.Stderr = pr, &dstErr
	if err := src.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("tar pipe: %w", err)
	}
	pw.Close()
	if err := dst.Start(); err != nil {
		pr.Close()
		_ = src.Wait()
		return fmt.Errorf("tar pipe: %w", err)
	}
	pr.Close()
	e1, e2 := src.Wait(), dst.Wait()
	if e1 != nil {
		return fmt.Errorf("tar pipe, source: %w: %s", e1, truncate(strings.TrimSpace(srcErr.String()), 200))
	}
	if e2 != nil {
		return fmt.Errorf("tar pipe, destination: %w: %s", e2, truncate(strings.TrimSpace(dstErr.String()), 200))
	}
	return nil
}

// scp3r copies the source tree with scp -3 -r (relayed through this host) to dir.
func (b *FilesBench) scp3r(ctx context.Context, dir string) error {
	tb := TransferBench{Src: b.Src, Dst: b.Dst}
	return tb.scp3(ctx, b.SrcDir, dir, "-r")
}

// transferState is what the bench reads of a transfer.
type transferState struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Streams    int    `json:"streams"`
	FilesDone  int64  `json:"files_done"`
	SameSystem bool   `json:"same_system"`
	Error      string `json:"error"`
}

// waitTransfer submits a transfer (POST /v1/transfers with body), polls it every poll until it
// is terminal and returns its last state; it fails unless the transfer succeeded. When ctx ends
// it cancels the transfer.
func (a *API) waitTransfer(ctx context.Context, body map[string]any, poll time.Duration) (transferState, error) {
	var t transferState
	if err := a.Call(ctx, "POST", "/v1/transfers", body, http.StatusAccepted, &t); err != nil {
		return t, fmt.Errorf("submit transfer: %w", err)
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		switch t.Status {
		case "succeeded":
			return t, nil
		case "failed", "canceled":
			return t, fmt.Errorf("transfer %s %s: %s", t.ID, t.Status, t.Error)
		}
		select {
		case <-ctx.Done():
			_ = a.Call(context.Background(), "DELETE", "/v1/transfers/"+t.ID, nil, http.StatusOK, nil)
			return t, ctx.Err()
		case <-tick.C:
		}
		id := t.ID
		if err := a.Call(ctx, "GET", "/v1/transfers/"+id, nil, http.StatusOK, &t); err != nil {
			return t, fmt.Errorf("poll transfer: %w", err)
		}
	}
}

// WriteMarkdown writes the runs as one table with files/s, seconds, CPU and sshapi's peak RSS,
// each peer run's files/s divided into the sshapi run's of the same round (of round 1 for a
// peer that ran once), and, when sshapi and a peer ran in more than one round, a line per peer
// with the ratio over all their rounds (every file copied divided by every second taken).
func (r *FilesReport) WriteMarkdown(w io.Writer) error {
	if len(r.Runs) == 0 {
		return nil
	}
	var b strings.Builder
	base := map[int]*FilesRun{}
	rounds := 0
	for i, s := range r.Runs {
		if s.Target == BaselineTarget {
			base[max(1, s.Round)] = &r.Runs[i]
		}
		rounds = max(rounds, s.Round)
	}
	f := r.Runs[0]
	fmt.Fprintf(&b, "#### %d files of %d bytes, system to system\n\n", f.Files, f.FileSize)
	b.WriteString("| target | round | how | verified | files/s | seconds | MB/s | CPU s (bench process + clients) | sshd CPU s | peak RSS MiB (bench process, hosts sshapi) | sshapi ÷ target (files/s) |\n")
	b.WriteString("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Runs {
		rate, ratio, rss, sshd := fmt.Sprintf("%.0f", s.FilesPerSecond), "–", "–", "–"
		if s.Error != "" {
			rate = "failed: " + truncate(strings.ReplaceAll(s.Error, "|", "/"), 100)
		} else if bs := base[max(1, s.Round)]; bs != nil && bs.Error == "" && s.Target != BaselineTarget && s.FilesPerSecond > 0 {
			ratio = fmt.Sprintf("%.2f×", bs.FilesPerSecond/s.FilesPerSecond)
		}
		if s.PeakRSSMiB > 0 {
			rss = fmt.Sprintf("%.0f (%.0f before)", s.PeakRSSMiB, s.RSSBeforeMiB)
		}
		if s.SSHDCPUSeconds > 0 {
			sshd = fmt.Sprintf("%.2f", s.SSHDCPUSeconds)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.2f | %.1f | %.2f | %s | %s | %s |\n", s.Target, max(1, s.Round), strings.ReplaceAll(s.How, "|", `\|`), s.Verified, rate, s.Seconds, s.MBps, s.CPUSeconds, sshd, rss, ratio)
	}
	b.WriteString("\n")
	if rounds > 1 {
		all := filesTotals(r.Runs)
		sa, ok := all[BaselineTarget]
		for _, t := range targetsInOrder(r.Runs) {
			tt := all[t]
			if t == BaselineTarget || !ok || tt.runs < 2 || sa.failed || tt.failed {
				continue
			}
			fmt.Fprintf(&b, "Over %d rounds each: sshapi %.0f files/s (%.2f s in all, CPU %.2f s + sshd %.2f s), %s %.0f files/s (%.2f s, CPU %.2f s + sshd %.2f s): sshapi ÷ %s **%.2f×**.\n\n",
				sa.runs, sa.rate(), sa.seconds, sa.cpu, sa.sshd, t, tt.rate(), tt.seconds, tt.cpu, tt.sshd, t, sa.rate()/tt.rate())
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// filesTotal adds up one target's runs.
type filesTotal struct {
	runs               int
	files              int64
	seconds, cpu, sshd float64
	failed             bool
}

func (t filesTotal) rate() float64 {
	if t.seconds <= 0 {
		return 0
	}
	return float64(t.files) / t.seconds
}

// filesTotals adds up the runs of each target.
func filesTotals(runs []FilesRun) map[string]filesTotal {
	out := map[string]filesTotal{}
	for _, s := range runs {
		t := out[s.Target]
		t.runs++
		t.files += int64(s.Files)
		t.seconds += s.Seconds
		t.cpu += s.CPUSeconds
		t.sshd += s.SSHDCPUSeconds
		t.failed = t.failed || s.Error != ""
		out[s.Target] = t
	}
	return out
}

// targetsInOrder lists the runs' targets in the order they first ran.
func targetsInOrder(runs []FilesRun) []string {
	var out []string
	for _, s := range runs {
		if !slices.Contains(out, s.Target) {
			out = append(out, s.Target)
		}
	}
	return out
}

// WriteJSON writes the report to path.
func (r *FilesReport) WriteJSON(path string) error {
	return writeJSON(path, r)
}
