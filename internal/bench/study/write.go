package study

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sshapi/sshapi/internal/bench"
)

// Sections are the parts of the paper beyond the study's sweep; nil when skipped.
type Sections struct {
	// Transfers holds the file transfer runs (streams, connections and channel counts).
	Transfers *bench.TransferReport
	// Listing holds the large-directory listing runs.
	Listing *bench.ListingReport
	// Ciphers holds the per-cipher uploads and downloads.
	Ciphers *bench.TransferReport
	// Clients holds the small requests from many clients at once.
	Clients *bench.ClientsReport
	// Files holds the many-small-files transfers.
	Files *bench.FilesReport
}

// Write stores report under out: benchmarks.json (with the extra sections' runs under
// "transfers", "listing", "ciphers", "clients" and "small_files"), img/*.png and benchmarks.md.
func Write(report *bench.Report, out string, extra Sections) error {
	if len(report.Runs) == 0 {
		return errNoRuns
	}
	if extra.Transfers != nil && len(extra.Transfers.Runs) == 0 {
		extra.Transfers = nil
	}
	if extra.Listing != nil && len(extra.Listing.Runs) == 0 {
		extra.Listing = nil
	}
	if extra.Ciphers != nil && len(extra.Ciphers.Runs) == 0 {
		extra.Ciphers = nil
	}
	if extra.Clients != nil && len(extra.Clients.Runs) == 0 {
		extra.Clients = nil
	}
	if extra.Files != nil && len(extra.Files.Runs) == 0 {
		extra.Files = nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("out dir: %w", err)
	}
	merged := struct {
		*bench.Report
		Transfers *bench.TransferReport `json:"transfers,omitempty"`
		Listing   *bench.ListingReport  `json:"listing,omitempty"`
		Ciphers   *bench.TransferReport `json:"ciphers,omitempty"`
		Clients   *bench.ClientsReport  `json:"clients,omitempty"`
		Files     *bench.FilesReport    `json:"small_files,omitempty"`
	}{report, extra.Transfers, extra.Listing, extra.Ciphers, extra.Clients, extra.Files}
	js, err := json.MarshalIndent(merged, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "benchmarks.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	imgs, err := bench.WritePlots(report, filepath.Join(out, "img"))
	if err != nil {
		return err
	}
	var timgs []string
	if extra.Transfers != nil {
		if timgs, err = extra.Transfers.WritePlots(filepath.Join(out, "img")); err != nil {
			return err
		}
	}
	var doc bytes.Buffer
	if err := document(&doc, report, imgs, extra, timgs); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "benchmarks.md"), doc.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write benchmarks.md: %w", err)
	}
	return nil
}

func document(b *bytes.Buffer, r *bench.Report, imgs []string, extra Sections, timgs []string) error {
	m := r.Meta
	fmt.Fprintf(b, `# Benchmarks

This page is written by `+"`make paper`"+` (`+"`sshapi bench paper --out docs`"+`). Every number below
was measured by that run on the machine described here; nothing is copied from elsewhere except
the published study's own figures, which are labelled as such. Re-run it to refresh the page;
the raw summaries are in [benchmarks.json](benchmarks.json).

## What the published study reported

The SSH-API study (Tapis/TACC) load-tested its service with Locust against an OpenSSH server
whose `+"`MaxStartups`"+` and `+"`MaxSessions`"+` had been raised to 3000, and reported:

- at 90 requests/s, 99%% of requests completed in under 2 s;
- at 50 requests/s, 90%% of requests completed in under 1 s.

Those are the study's numbers on its own hardware, not measured here. sshapi's claim is that it
does better against a **stock** sshd (`+"`MaxStartups 10:30:100`"+`, `+"`MaxSessions 10`"+`), which is
what the run below uses.

## Setup of this run

| | |
|---|---|
| started | %s |
| machine | %s, %d CPUs |
| kernel | %s |
| sshd | %s |
| OpenSSH | %s |
| Go | %s |
| peers | %s |
| runs per point | %d |

`, m.Started.UTC().Format("2006-01-02 15:04 MST"), m.Machine, m.CPUs, m.Kernel, m.SSHD, m.OpenSSH, m.Go, versions(m.Versions), m.Runs)
	b.WriteString("How it was measured:\n\n")
	for _, n := range m.Notes {
		fmt.Fprintf(b, "- %s.\n", n)
	}
	b.WriteString(`- Open loop: requests are sent at a constant arrival rate whatever the target does, and each
  request's latency counts from the moment it was *scheduled* to be sent, so queueing behind a slow
  target shows up in the percentiles (no coordinated omission). Percentiles come from an HDR
  histogram (3 significant digits) over the successful requests; failures are counted by kind
  beside them, and a target with failures is not comparable on latency alone.
- Targets, all against the same sshd in the same run:
  - **sshapi**: ` + "`POST /sshapi/v2/{name}`" + ` (the study's route) over HTTP keep-alive, through
    sshapi's connection pool (defaults: up to 6 connections per credential, 8 channels each).
  - **openssh**: one ` + "`ssh`" + ` process and one new SSH connection per request.
  - **openssh-mux**: one short ` + "`ssh -S`" + ` client per request over 6 ControlMaster connections
    opened by the tool beforehand (round robin; OpenSSH's client does not queue when a master
    is at the server's MaxSessions, it fails).
  - **asyncssh**, **paramiko** (` + "`TCP_NODELAY`" + `): Python peers in ` + "`bench/peers/`" + ` with a pool of 6
    connections × 8 channels each, driven over a pipe by the same Go engine that drives sshapi.
- Short windows are noisy: at low rates a window holds few requests (10 requests/s for 5 s is
  50), so its p99 and p99.9 are close to its maximum. Run longer windows (` + "`--duration 30s`" + ` or
  more) before drawing fine conclusions; large ratios and failure counts are robust, small
  ratios are not.
- OpenSSH 9.2's client and server negotiate ` + "`sntrup761x25519-sha512`" + ` key exchange by
  default; the openssh peer pays for it, on both ends and on the same CPUs, for every request.
- Burst: n identical requests scheduled at the same instant; "time to all done" is until the
  last one finished.
- Sessions: n fresh SSH connections (TCP, key exchange, public-key authentication) requested at
  once. For sshapi each is a ` + "`POST /v1/systems/{id}/credential/check`" + `, which always dials a new
  connection through the pool's per-host dial limiter (at most 3 unauthenticated connections in
  flight, so sshd's MaxStartups never drops one) instead of borrowing a pooled one. For openssh
  each is ` + "`ssh … true`" + ` (OpenSSH's client cannot stop after authenticating, so it also runs
  ` + "`true`" + `); the Python peers connect, authenticate and close. openssh-mux has no such operation.

## Headline: sshapi and the best peer at each rate

The best peer at a rate is the one with the fewest failures, then the lowest p99.

`)
	if err := r.WriteHeadline(b); err != nil {
		return err
	}
	if err := studyCriteria(b, r); err != nil {
		return err
	}
	b.WriteString("## Every target\n\nLatencies in milliseconds; \"÷ sshapi\" is the target's value divided by sshapi's at the same rate (above 1 means slower than sshapi).\n\n")
	if err := r.WriteMarkdown(b); err != nil {
		return err
	}
	if len(imgs) > 0 {
		b.WriteString("## Figures\n\n")
		for _, img := range imgs {
			caption := "Latency percentile curves per offered rate, one panel per target (the study's Figure 1)"
			if strings.HasPrefix(img, "fig2") {
				caption = "Mean latency per offered rate and command, one line per target (the study's Figure 2)"
			}
			fmt.Fprintf(b, "![%s](img/%s)\n\n*%s.*\n\n", caption, img, caption)
		}
	}
	if err := TransferSection(b, extra.Transfers, timgs); err != nil {
		return err
	}
	if err := CipherSection(b, extra.Ciphers); err != nil {
		return err
	}
	if err := FilesSection(b, extra.Files); err != nil {
		return err
	}
	if err := ListingSection(b, extra.Listing); err != nil {
		return err
	}
	if err := ClientsSection(b, extra.Clients); err != nil {
		return err
	}
	b.WriteString(`## Reproduce

    make bench-deps     # Python peers into bench/.venv (asyncssh, paramiko; pinned)
    make paper          # needs root (the sshd test user) and openssh-server

Longer windows: ` + "`./bin/sshapi bench paper --out docs --duration 60s`" + `. Against your own deployment:
` + "`sshapi bench commands --url URL --token T --system ID --rates 10,50,90 --compare all --ssh user@host:port --ssh-key FILE --ssh-host-key 'ssh-ed25519 AAAA…'`" + `.
One section alone: ` + "`sshapi bench transfer --size 256MiB --rtt 50ms --rate 1gbit --channels 1,2,4,8,auto --compare`" + `,
` + "`sshapi bench transfer --size 256MiB --compare --ciphers aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes256-ctr`" + `,
` + "`sshapi bench listing --entries 10000`" + `. Skip or size the paper's sections with ` + "`--transfer-size none`" + `,
` + "`--channels none`" + `, ` + "`--cipher-size none`" + ` (or ` + "`--ciphers LIST`" + `), ` + "`--small-files -1`" + ` (or a count),
` + "`--list-entries -1`" + ` and ` + "`--clients -1`" + ` (or a count; ` + "`--clients-duration`" + `, ` + "`--clients-peers`" + `).
`)
	return nil
}

// studyCriteria puts the study's two published criteria next to what each target measured
// here at the same rates.
func studyCriteria(b *bytes.Buffer, r *bench.Report) error {
	criteria := []struct {
		rate      float64
		pct       string
		published string
		value     func(bench.Stats) float64
	}{
		{90, "p99", "< 2000 (99% under 2 s)", func(s bench.Stats) float64 { return s.P99 }},
		{50, "p90", "< 1000 (90% under 1 s)", func(s bench.Stats) float64 { return s.P90 }},
	}
	targets := r.Targets()
	wrote := false
	for _, cmd := range r.Commands() {
		for _, c := range criteria {
			if _, ok := r.Find(bench.ScenarioCommands, bench.BaselineTarget, cmd, c.rate); !ok {
				continue
			}
			if !wrote {
				b.WriteString("## The study's criteria, measured here\n\nThe study's figures were measured on its hardware with raised sshd limits; the others below are this run's, against a stock sshd. Milliseconds; failed requests are not in the percentiles and are listed.\n\n")
				b.WriteString("| command | offered/s | percentile | study (published) | " + strings.Join(targets, " | ") + " |\n")
				b.WriteString("|---|---:|---|---|" + strings.Repeat("---:|", len(targets)) + "\n")
				wrote = true
			}
			fmt.Fprintf(b, "| `%s` | %g | %s | %s |", cmd, c.rate, c.pct, c.published)
			for _, t := range targets {
				s, ok := r.Find(bench.ScenarioCommands, t, cmd, c.rate)
				switch {
				case !ok:
					b.WriteString(" – |")
				case s.OK == 0:
					fmt.Fprintf(b, " all %d failed |", s.Failed)
				case s.Failed > 0:
					fmt.Fprintf(b, " %.1f (%d/%d failed) |", c.value(s.Latency), s.Failed, s.Scheduled)
				default:
					fmt.Fprintf(b, " %.1f |", c.value(s.Latency))
				}
			}
			b.WriteString("\n")
		}
	}
	if wrote {
		b.WriteString("\n")
	}
	return nil
}

// writeSection writes a section of benchmarks.md: heading and intro, the notes as a list, the
// tables, then figures (Markdown).
func writeSection(w io.Writer, heading, intro string, notes []string, tables func(io.Writer) error, figures string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n%s\n\n", heading, intro)
	for _, n := range notes {
		fmt.Fprintf(&b, "- %s.\n", n)
	}
	b.WriteString("\n")
	if err := tables(&b); err != nil {
		return err
	}
	b.WriteString(figures)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("%s section: %w", heading, err)
	}
	return nil
}

func versions(v map[string]map[string]string) string {
	var names []string
	for n := range v {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		var kv []string
		for k, val := range v[n] {
			kv = append(kv, k+" "+val)
		}
		sort.Strings(kv)
		parts = append(parts, n+": "+strings.Join(kv, ", "))
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, "; ")
}
