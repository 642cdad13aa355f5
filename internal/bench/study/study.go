// Package study reproduces the published SSH-API study's load test on this machine: it starts a
// throwaway stock OpenSSH sshd on loopback and an sshapi service in-process, registers the sshd
// as a system, and runs the bench sweep (open-loop rates of `uptime` and of `ls` on a
// 10,000-file directory, a burst, and a batch of fresh SSH sessions) against sshapi and the
// peers side by side. It writes the JSON report, the plots and docs/benchmarks.md.
package study

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/service"
)

// Options configure a study run. Zero values take the defaults noted.
type Options struct {
	// Out is the directory for benchmarks.md, benchmarks.json and img/ (default "docs").
	Out string
	// Rates are the offered rates (default 10, 50, 90, 100, 500 per second).
	Rates []float64
	// Duration is the scheduling window per rate and target (default 5s).
	Duration time.Duration
	// LsFiles is the size of the directory `ls` lists (default 10,000).
	LsFiles int
	// BurstN requests are sent at once (default 500); SessionsN fresh SSH connections are
	// opened at once (default 200). Negative skips.
	BurstN, SessionsN int
	// Peers to compare with (default all).
	Peers []string
	// Python and PeersDir run the Python peers (default bench/.venv/bin/python, bench/peers).
	Python, PeersDir string
	// SSHDConfig is appended to the sshd's stock configuration (e.g. "MaxStartups 3000").
	SSHDConfig string
	// MaxInFlight caps outstanding requests per run (default 256); Timeout bounds one request
	// (default 30s); Drain bounds the wait for stragglers after each rate run (default 10s).
	MaxInFlight    int
	Timeout, Drain time.Duration
	// Pause between runs (default 1s, tripled after a run with failures).
	Pause time.Duration
	// Progress receives progress lines (nil = quiet).
	Progress io.Writer
	// TransferSize is the file the transfer section moves (0 skips the section; `bench paper`
	// defaults to 256 MiB).
	TransferSize int64
	// Channels are the SFTP channel counts of the transfer section's API downloads and uploads
	// at 1 Gbit/s × 50 ms (0 = automatic; nil = 1, 2, 4, 8, automatic; empty skips them).
	Channels []int
	// ListEntries is the directory size of the listing section (default 10,000; negative
	// skips it).
	ListEntries int
	// CipherSize is the file the per-cipher section moves (0 skips the section; `bench paper`
	// defaults to 256 MiB); Ciphers are its ciphers (nil = PaperCiphers; empty skips it).
	CipherSize int64
	Ciphers    []string
	// Clients is the number of clients of the small-requests section (0 or less skips it;
	// `bench paper` defaults to 50), each run lasting ClientsDuration (default 10s), against
	// sshapi and ClientsPeers (nil = asyncssh).
	Clients         int
	ClientsDuration time.Duration
	ClientsPeers    []string
	// SmallFiles is the number of 4 KiB files the many-small-files section copies (0 or less
	// skips it; `bench paper` defaults to 100,000).
	SmallFiles int
}

func (o *Options) defaults() {
	if o.Out == "" {
		o.Out = "docs"
	}
	if len(o.Rates) == 0 {
		o.Rates = []float64{10, 50, 90, 100, 500}
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.LsFiles == 0 {
		o.LsFiles = 10000
	}
	if o.BurstN == 0 {
		o.BurstN = 500
	}
	if o.SessionsN == 0 {
		o.SessionsN = 200
	}
	if o.Peers == nil {
		o.Peers = bench.AllPeers
	}
	if o.Python == "" {
		o.Python = "bench/.venv/bin/python"
	}
	if o.PeersDir == "" {
		o.PeersDir = "bench/peers"
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 256
	}
	if o.Channels == nil {
		o.Channels = []int{1, 2, 4, 8, 0}
	}
	if o.ListEntries == 0 {
		o.ListEntries = 10_000
	}
	if o.Ciphers == nil {
		o.Ciphers = PaperCiphers
	}
}

// Run performs the study and writes its outputs; it returns the report.
func Run(ctx context.Context, o Options) (*bench.Report, error) {
	o.defaults()
	started := time.Now()
	loadStart := loadAverage()
	// The directory is per run (see lab.userDir); the report names it the same in every run.
	lsName := fmt.Sprintf("bench-ls-%d", o.LsFiles)
	lsLabel := "ls " + lsName
	l, lsDir, err := startListLab(ctx, o.SSHDConfig, lsName, o.LsFiles)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	api, stop, err := l.system(ctx, "data", config.Default())
	if err != nil {
		return nil, err
	}
	defer stop()
	ep, err := l.sshEndpoint("ssh", l.srv.Host, l.srv.Port)
	if err != nil {
		return nil, err
	}

	targets := &bench.Targets{API: api, System: benchSystem, Endpoint: ep, Peers: o.Peers, Python: o.Python, PeersDir: o.PeersDir}
	if err := targets.Start(ctx); err != nil {
		return nil, err
	}
	defer targets.Stop()

	report := &bench.Report{Meta: Machine(ctx)}
	report.Meta.Started = started
	report.Meta.Runs = 1
	report.Meta.SSHD = "OpenSSH sshd on 127.0.0.1, stock limits (MaxStartups 10:30:100, MaxSessions 10)"
	if o.SSHDConfig != "" {
		report.Meta.SSHD += "; plus: " + strings.ReplaceAll(strings.TrimSpace(o.SSHDConfig), "\n", "; ")
	}
	report.Meta.Versions = targets.Versions()
	report.Meta.Versions["sshapi"] = map[string]string{"sshapi": service.Version, "go": runtime.Version()}
	report.Meta.Notes = []string{
		fmt.Sprintf("%s per offered rate and target, targets interleaved per rate; each request is timed from its scheduled send; at most %d requests in flight per run; per-request timeout %s; stragglers get %s after the window",
			o.Duration, o.MaxInFlight, orDefault(o.Timeout, 30*time.Second), orDefault(o.Drain, 10*time.Second)),
		"sshapi runs in the bench process (one Go runtime for the load generator and the service); the Python peers run as separate processes; all share the machine with sshd",
		fmt.Sprintf("`%s` lists a directory of %d empty files (%d bytes of output) in the remote user's home, named %s-<pid>-<random> so that concurrent runs never share it", lsLabel, o.LsFiles, o.LsFiles*7, lsName),
	}
	lsCmd := "ls " + filepath.Base(lsDir)
	runner := &bench.Runner{Targets: targets, Report: report, Timeout: o.Timeout, Drain: o.Drain, MaxInFlight: o.MaxInFlight, Warmup: 24, Pause: o.Pause, Progress: o.Progress,
		Labels: map[string]string{lsCmd: lsLabel}}
	for _, cmd := range []string{"uptime", lsCmd} {
		if err := runner.Commands(ctx, cmd, o.Rates, o.Duration); err != nil {
			return report, err
		}
	}
	if o.BurstN > 0 {
		if err := runner.Burst(ctx, "uptime", o.BurstN); err != nil {
			return report, err
		}
	}
	if o.SessionsN > 0 {
		if err := runner.Sessions(ctx, o.SessionsN); err != nil {
			return report, err
		}
	}
	var extra Sections
	if o.TransferSize > 0 {
		var err error
		if extra.Transfers, err = RunTransfer(ctx, PaperTransferOptions(o.TransferSize, o.Progress)); err != nil {
			return report, fmt.Errorf("transfers: %w", err)
		}
		if len(o.Channels) > 0 {
			ch, err := RunTransfer(ctx, PaperChannelOptions(o.TransferSize, o.Channels, o.Progress))
			if err != nil {
				return report, fmt.Errorf("transfers per channel count: %w", err)
			}
			extra.Transfers.Runs = append(extra.Transfers.Runs, ch.Runs...)
			extra.Transfers.Meta.Notes = append(extra.Transfers.Meta.Notes, channelsNote)
			for _, n := range ch.Meta.Notes {
				if strings.HasPrefix(n, "1-minute load average") {
					extra.Transfers.Meta.Notes = append(extra.Transfers.Meta.Notes, "channel runs: "+n)
				}
			}
		}
	}
	if o.CipherSize > 0 && len(o.Ciphers) > 0 {
		var err error
		if extra.Ciphers, err = RunTransfer(ctx, PaperCipherOptions(o.CipherSize, o.Ciphers, o.Progress)); err != nil {
			return report, fmt.Errorf("ciphers: %w", err)
		}
	}
	if o.SmallFiles > 0 {
		var err error
		if extra.Files, err = RunFiles(ctx, PaperFilesOptions(o.SmallFiles, o.Progress)); err != nil {
			return report, fmt.Errorf("small files: %w", err)
		}
	}
	if o.ListEntries > 0 {
		var err error
		if extra.Listing, err = RunListing(ctx, PaperListingOptions(o.ListEntries, o.Progress)); err != nil {
			return report, fmt.Errorf("listing: %w", err)
		}
	}
	if o.Clients > 0 {
		var err error
		if extra.Clients, err = RunClients(ctx, ClientsOptions{Clients: o.Clients, Duration: o.ClientsDuration, Rounds: PaperClientsRounds, Peers: o.ClientsPeers,
			Python: o.Python, PeersDir: o.PeersDir, Progress: o.Progress}); err != nil {
			return report, fmt.Errorf("small requests: %w", err)
		}
	}
	report.Meta.Notes = append(report.Meta.Notes, fmt.Sprintf("1-minute load average of the machine when the run started: %s; when it ended: %s (anything above 0 beyond this run's own work means other processes shared the CPUs)", loadStart, loadAverage()))
	if err := Write(report, o.Out, extra); err != nil {
		return report, err
	}
	return report, paperTus(ctx, o) // resumable uploads beside curl PUT (tus.go), appended to benchmarks.md
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Machine describes this machine and the SSH software for a report's Meta.
func Machine(ctx context.Context) bench.Meta {
	m := bench.Meta{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Machine = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			if kb, err := strconv.Atoi(f[1]); err == nil {
				m.Machine += fmt.Sprintf(", %d GiB RAM", (kb+(1<<19))>>20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if out, err := exec.CommandContext(ctx, "ssh", "-V").CombinedOutput(); err == nil || len(out) > 0 {
		m.OpenSSH = strings.TrimSpace(string(out))
	}
	return m
}

// loadAverage returns the 1-minute load average from /proc/loadavg, or "unknown".
func loadAverage() string {
	if f := strings.Fields(readLoadavg()); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// readLoadavg returns the line of /proc/loadavg, or "" if it cannot be read.
func readLoadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return string(b)
}

// errNoRuns is returned by Write for an empty report.
var errNoRuns = errors.New("study: the report has no runs")
