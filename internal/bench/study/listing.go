package study

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/service"
)

// ListingOptions configure a self-hosted listing bench. Zero values take the defaults noted.
type ListingOptions struct {
	// Entries in the listed directory (default 10,000; at most 100,000, a listing's window).
	Entries int
	// Concurrency levels (default 1 and 50).
	Concurrency []int
	// Listings per run (default 40; at concurrency c at least Rounds × c, Rounds default 4).
	Listings, Rounds int
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
}

// PaperListingOptions are the listing runs of `bench paper`: a directory of entries, 20
// listings one at a time and 100 with 50 at a time, per target.
func PaperListingOptions(entries int, progress io.Writer) ListingOptions {
	return ListingOptions{Entries: entries, Concurrency: []int{1, 50}, Listings: 20, Rounds: 2, Progress: progress}
}

// listingSSHD lets one multiplexed OpenSSH connection carry 50 sessions at once, so the OpenSSH
// peers can list at the same concurrency as sshapi (stock MaxSessions 10 would refuse the rest).
const listingSSHD = "MaxSessions 64"

// sshapiSFTPOnly is the target name of sshapi with http.list_sftp_only set.
const sshapiSFTPOnly = "sshapi sftp-only"

// RunListing starts a throwaway sshd, creates a directory of o.Entries empty files, and lists it
// through two in-process sshapi services (default: one `find -printf` on the server; and
// http.list_sftp_only: SFTP READDIRs) and through OpenSSH `find -printf` and `ls -la` over one
// ControlMaster connection, at each concurrency.
func RunListing(ctx context.Context, o ListingOptions) (*bench.ListingReport, error) {
	if o.Entries <= 0 {
		o.Entries = 10_000
	}
	settled := settle(ctx)
	loadStart := loadAverage()
	l, dir, err := startListLab(ctx, listingSSHD, fmt.Sprintf("bench-listing-%d", o.Entries), o.Entries)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	base, err := envConfig()
	if err != nil {
		return nil, err
	}
	var targets []bench.ListingTarget
	for _, v := range []struct {
		name     string
		sftpOnly bool
	}{{bench.BaselineTarget, false}, {sshapiSFTPOnly, true}} {
		cfg := base
		cfg.HTTP.ListSFTPOnly = v.sftpOnly
		// Every listing reads the directory, as the OpenSSH peers' do: a kept listing would
		// answer the repeats of one unchanged directory from memory.
		cfg.HTTP.ListSnapshotBytes = -1
		api, stop, err := l.system(ctx, "data-"+bench.Slug(v.name), cfg)
		if err != nil {
			return nil, err
		}
		defer stop()
		n, _, err := api.CountEntries(ctx, benchSystem, dir, o.Entries)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		if n != o.Entries {
			return nil, fmt.Errorf("%s lists %d of %d entries", v.name, n, o.Entries)
		}
		targets = append(targets, bench.ListingTarget{Name: v.name, Op: api.APIListOp(benchSystem, dir, o.Entries)})
	}
	ep, err := l.sshEndpoint("ssh", l.srv.Host, l.srv.Port)
	if err != nil {
		return nil, err
	}
	peers, stopMux, err := bench.MuxListingTargets(ctx, ep, dir)
	if err != nil {
		return nil, err
	}
	defer stopMux()
	targets = append(targets, peers...)

	rep := &bench.ListingReport{Meta: Machine(ctx)}
	rep.Meta.Started, rep.Meta.Runs = time.Now(), 1
	rep.Meta.SSHD = "OpenSSH sshd on 127.0.0.1, stock configuration but " + listingSSHD
	rep.Meta.Versions = map[string]map[string]string{"sshapi": {"sshapi": service.Version}}
	lb := &bench.ListingBench{Targets: targets, Entries: o.Entries, Concurrency: o.Concurrency, Listings: o.Listings, Rounds: o.Rounds,
		SSHDPIDs: l.sshdPIDs(), Progress: o.Progress, Report: rep}
	err = lb.Run(ctx)
	rep.Meta.Notes = ListingNotes(dir, lb.Listings, lb.Rounds, listingSSHD)
	rep.Meta.Notes = append(rep.Meta.Notes, fmt.Sprintf("1-minute load average when the listing runs started: %s; when they ended: %s", loadStart, loadAverage()), settled)
	return rep, err
}

// ListingNotes say how a listing bench of dir with listings per run (at concurrency c at least
// rounds × c) measured (sshd: the sshd setting that differs from stock, if any).
func ListingNotes(dir string, listings, rounds int, sshd string) []string {
	cmds := bench.ListingCommands(dir)
	notes := []string{
		fmt.Sprintf("a directory of empty files; each run is max(%d, %d × concurrency) listings, concurrency of them in flight at a time; latency is one listing from request to the last byte; targets interleaved per concurrency after 8 unmeasured listings each", listings, rounds),
		"**sshapi**: `GET /v1/systems/{id}/ls/{path}?limit=<entries>`, the full metadata JSON in one page, read to the end, over HTTP keep-alive; sshapi's defaults list a directory larger than 64 KiB (`http.list_stream_dir_bytes`) with one `find -printf` on the server; **" + sshapiSFTPOnly + "** is a second sshapi with `http.list_sftp_only: true` (SFTP READDIRs); smaller directories are read whole over SFTP by both; kept listings are off in both (`http.list_snapshot_bytes: -1`), so every listing reads the directory: with the defaults a repeat of the same unchanged directory within 15 s is answered from memory",
		"**" + bench.PeerMuxFind + "**: `ssh -S` over one ControlMaster connection running `" + strings.ReplaceAll(cmds[bench.PeerMuxFind], dir, "DIR") + "` (the metadata sshapi returns, not parsed); **" + bench.PeerMuxLsLa + "**: `ls -la DIR` the same way; output discarded",
		"CPU per listing: user+system of the bench process (which hosts both sshapi services and runs the OpenSSH clients; less its thread that samples sshd, whose own CPU is measured and taken off) and of the sshd process tree (sampled from /proc every 100 ms, each process with the children it waited for, so short session commands count), divided by the successful listings",
	}
	if sshd != "" {
		notes = append(notes, "the sshd runs with `"+sshd+"` so that one multiplexed OpenSSH connection can carry 50 listings at once; sshapi uses its defaults (up to 6 connections × 8 channels per credential)")
	}
	return notes
}

// ListingSection writes the listing report's notes and tables into a Markdown document.
func ListingSection(w io.Writer, r *bench.ListingReport) error {
	if r == nil || len(r.Runs) == 0 {
		return nil
	}
	return writeSection(w, "Listing a large directory", "One directory listed with full metadata through sshapi's API, one listing at a time and many at once, beside the shortest OpenSSH equivalents over one multiplexed connection to the same sshd. \"÷ sshapi\" is the target's listings/s divided by sshapi's (above 1 means faster than sshapi).",
		r.Meta.Notes, r.WriteMarkdown, "")
}
