package study

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
)

// TestStudyEndToEnd runs a miniature study against a real sshd and an in-process sshapi, with
// the OpenSSH peers (the Python peers need bench/.venv and are covered by `make paper`). It
// checks that every scenario ran for every target and that the documents were written; it
// asserts no latency.
func TestStudyEndToEnd(t *testing.T) {
	out := t.TempDir()
	rep, err := Run(t.Context(), Options{
		Out: out, Rates: []float64{90}, Duration: 300 * time.Millisecond, LsFiles: 50, BurstN: 20, SessionsN: 4,
		Peers: []string{bench.PeerOpenSSH, bench.PeerOpenSSHMux}, Drain: time.Second, Pause: 100 * time.Millisecond, ListEntries: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range rep.Runs {
		count[s.Scenario+"/"+s.Target]++
		if s.Target == bench.BaselineTarget && s.Failed != 0 {
			t.Errorf("sshapi failed in %s %q: %v %v", s.Scenario, s.Command, s.Errors, s.ErrorExamples)
		}
		if s.Scheduled == 0 || s.OK+s.Failed != s.Scheduled {
			t.Errorf("%s/%s: scheduled %d ok %d failed %d", s.Scenario, s.Target, s.Scheduled, s.OK, s.Failed)
		}
	}
	for key, want := range map[string]int{
		"commands/sshapi": 2, "commands/openssh": 2, "commands/openssh-mux": 2,
		"burst/sshapi": 1, "burst/openssh": 1, "burst/openssh-mux": 1,
		"sessions/sshapi": 1, "sessions/openssh": 1, "sessions/openssh-mux": 0,
	} {
		if count[key] != want {
			t.Errorf("%s ran %d times, want %d (all: %v)", key, count[key], want, count)
		}
	}
	if got := rep.Commands(); len(got) != 2 || got[1] != "ls bench-ls-50" {
		t.Errorf("commands %v", got)
	}
	doc, err := os.ReadFile(filepath.Join(out, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"99% of requests completed in under 2 s", "## The study's criteria, measured here", "MaxStartups 10:30:100", "| 90 | sshapi |", "| 90 | openssh-mux |",
		"img/fig1-uptime.png", "img/fig2-mean-latency.png", "#### Burst", "#### Sessions", rep.Meta.Go} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	for _, f := range []string{"benchmarks.json", "img/fig1-uptime.png", "img/fig1-ls-bench-ls-50.png", "img/fig2-mean-latency.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestWriteSections: the transfer (with channel counts) and listing sections reach
// benchmarks.md, benchmarks.json and img/ beside the study's sweep.
func TestWriteSections(t *testing.T) {
	out := t.TempDir()
	run := func(rate, ms float64) bench.Summary {
		return bench.Summary{Target: bench.BaselineTarget, Scenario: bench.ScenarioCommands, Command: "uptime", Rate: rate,
			Scheduled: 10, OK: 10, AchievedRate: rate, Latency: bench.Stats{Min: ms / 2, Mean: ms, P50: ms, P90: ms, P99: 2 * ms, P999: 2 * ms, Max: 2 * ms},
			Curve: []bench.Point{{Percentile: 0, Ms: ms / 2}, {Percentile: 50, Ms: ms}, {Percentile: 99, Ms: 2 * ms}, {Percentile: 100, Ms: 2 * ms}}, Errors: map[string]int{}}
	}
	rep := &bench.Report{Runs: []bench.Summary{run(10, 1), run(50, 3)}}
	const path = "1 Gbit/s × 50ms RTT (wanem)"
	extra := Sections{
		Transfers: &bench.TransferReport{Runs: []bench.TransferRun{
			{Path: path, Scenario: bench.TransferDownloadChannels, Target: bench.BaselineTarget, Streams: 2, StreamsUsed: 2, MBps: 80, LinkMBps: 125},
			{Path: path, Scenario: bench.TransferDownloadChannels, Target: bench.PeerSFTP, Streams: 1, MBps: 40, LinkMBps: 125},
		}},
		Listing: &bench.ListingReport{Meta: bench.Meta{Notes: []string{"a note"}}, Runs: []bench.ListingRun{
			{Target: bench.BaselineTarget, Entries: 10000, Concurrency: 50, Listings: 100, PerSecond: 12},
		}},
		Ciphers: &bench.TransferReport{Runs: []bench.TransferRun{
			{Path: "loopback", Scenario: bench.TransferUpload, Cipher: "aes256-ctr", Target: bench.BaselineTarget, Bytes: 1 << 30, MBps: 300, CPUSeconds: 3, SSHDCPUSeconds: 2},
			{Path: "loopback", Scenario: bench.TransferUpload, Cipher: "aes256-ctr", Target: bench.PeerSFTP, Bytes: 1 << 30, MBps: 200, CPUSeconds: 2.25, ChildCPUSeconds: 2, SSHDCPUSeconds: 2.5},
			{Path: "loopback", Scenario: bench.TransferUpload, Cipher: "aes256-ctr", Target: bench.BaselineTarget, Pool: bench.PoolWarm, Digest: bench.DigestNone, Bytes: 1 << 30, MBps: 400, CPUSeconds: 1.8, SSHDCPUSeconds: 2},
		}},
		Clients: &bench.ClientsReport{Runs: []bench.ClientsRun{
			{Case: bench.CaseChecksum, Target: bench.BaselineTarget, Request: "GET", Clients: 50, Summary: bench.Summary{Scheduled: 900, OK: 900, AchievedRate: 900, Latency: bench.Stats{P50: 50, P99: 100}}},
			{Case: bench.CaseChecksum, Target: bench.PeerAsyncSSH, Request: "sha256sum", Clients: 50, Summary: bench.Summary{Scheduled: 300, OK: 300, AchievedRate: 300, Latency: bench.Stats{P50: 150, P99: 400}}},
		}},
		Files: &bench.FilesReport{Runs: []bench.FilesRun{
			{Target: bench.BaselineTarget, How: "POST", Files: 100000, FileSize: 4096, Seconds: 50, FilesPerSecond: 2000, PeakRSSMiB: 300, RSSBeforeMiB: 100},
			{Target: bench.PeerTarPipe, How: "tar", Files: 100000, FileSize: 4096, Seconds: 10, FilesPerSecond: 10000},
		}},
	}
	if err := Write(rep, out, extra); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(out, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## File transfers", "per SFTP channel count: " + path, "| 64% |", "img/transfer-channels.png",
		"## Listing a large directory", "- a note.", "#### Listing a directory of 10000 entries, 50 at a time", "## Reproduce",
		"## Ciphers", "| `aes256-ctr` | upload | 300.0 | 200.0 | 1.50× | 3.00 | 2.00 | 1.50× | 0.25 | 2.00 | 2.50 |", "| `aes256-ctr` | upload, digest=none (warm pool) | 400.0 | 200.0 | 2.00× | 1.80 | 2.00 | 0.90× | 0.25 | 2.00 | 2.50 |",
		"## Small requests from many clients at once", "| asyncssh | sha256sum | 300 | 0 | 300.0 | 150 | 400 |", "| 3.00× | 0.25× |", "sshapi's 900.0 checksums/s with 50 clients in this run are 6.77–8.57× those figures",
		"## Many small files", "| sshapi | 1 | POST |", "| 300 (100 before) |", "| 0.20× |"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	js, err := os.ReadFile(filepath.Join(out, "benchmarks.json"))
	if err != nil || !strings.Contains(string(js), `"listing"`) || !strings.Contains(string(js), `"download-channels"`) ||
		!strings.Contains(string(js), `"ciphers"`) || !strings.Contains(string(js), `"clients"`) || !strings.Contains(string(js), `"small_files"`) {
		t.Errorf("benchmarks.json lacks the sections: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "img", "transfer-channels.png")); err != nil {
		t.Error(err)
	}
}
