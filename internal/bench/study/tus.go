package study

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/service"
)

// TusOptions configure the resumable upload bench: uploads of one file through sshapi's tus
// endpoint beside a plain curl PUT of the same file to the same service. Zero values take the
// defaults noted.
type TusOptions struct {
	// Size of the file (default 256 MiB).
	Size int64
	// Chunks are the tus PATCH sizes (0 = whole file; default 8 MiB, 64 MiB and the whole file).
	Chunks []int64
	// Rounds repeats each target per path, interleaved (default 3).
	Rounds int
	// Paths between sshapi and the sshd (default loopback and 1 Gbit/s × 50 ms).
	Paths []TransferPath
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
}

func (o *TusOptions) defaults() {
	if o.Size <= 0 {
		o.Size = 256 << 20
	}
	if o.Chunks == nil {
		o.Chunks = []int64{8 << 20, 64 << 20, 0}
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if len(o.Paths) == 0 {
		o.Paths = []TransferPath{{}, {RTT: 50 * time.Millisecond, Rate: 125_000_000}}
	}
}

// RunTus starts a throwaway stock sshd and an in-process sshapi, registers the sshd once per
// path (on loopback directly, otherwise through a wanem proxy), and measures the uploads.
func RunTus(ctx context.Context, o TusOptions) (*bench.TusReport, error) {
	o.defaults()
	curl, err := bench.LookCurl()
	if err != nil {
		return nil, err
	}
	settled := settle(ctx)
	loadStart := loadAverage()
	l, err := startLab(ctx, "")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	base, err := envConfig()
	if err != nil {
		return nil, err
	}
	api, stop, err := l.service(ctx, "data-tus", base, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	remoteDir, err := l.userDir("bench-tus")
	if err != nil {
		return nil, err
	}
	local := filepath.Join(l.tmp, "tus-src.bin")
	if err := randomFile(local, o.Size); err != nil {
		return nil, err
	}
	rep := &bench.TusReport{Meta: Machine(ctx)}
	rep.Meta.Started, rep.Meta.Runs = time.Now(), o.Rounds
	rep.Meta.SSHD = "OpenSSH sshd on 127.0.0.1, stock configuration"
	rep.Meta.Versions = map[string]map[string]string{"sshapi": {"sshapi": service.Version}}
	for i, path := range o.Paths {
		ends := &pathEnds{lab: l, path: path}
		ep, err := ends.system(ctx, api, fmt.Sprintf("tus%d", i), nil)
		if err == nil {
			tb := &bench.TusBench{API: api, System: ep.System, Path: path.Name(), Local: local, Size: o.Size, RemoteDir: remoteDir,
				Chunks: o.Chunks, Rounds: o.Rounds, Curl: curl, Progress: o.Progress, Report: rep}
			err = tb.Run(ctx)
		}
		ends.close()
		if err != nil {
			return rep, err
		}
	}
	rep.Meta.Notes = append(TusNotes(o.Size),
		fmt.Sprintf("1-minute load average when the runs started: %s; when they ended: %s", loadStart, loadAverage()), settled)
	return rep, nil
}

// TusNotes say how the resumable upload bench measured a file of size bytes.
func TusNotes(size int64) []string {
	return []string{
		fmt.Sprintf("a %d MiB file of random bytes uploaded to the same system and directory, overwriting; rounds interleave the targets; MB/s is 10^6 bytes per second of wall time from the first request to the last answer", size>>20),
		"curl PUT: `curl -sS -T FILE -H 'X-Checksum-Sha256: …' …/content/PATH?overwrite=true` (Debian's curl, its defaults: one request, `Expect: 100-continue`), which sshapi streams to the sshd through SFTP, striped over several channels on a long path",
		"tus: the Go client `sshapi put` uses (client.UploadResumable, in the bench process that also hosts sshapi): POST to create the upload with its SHA-256, then PATCHes of the given size one after another (the protocol allows one writer per upload); the server writes each PATCH body to the part file 1 MiB at a time, committing the offset and hash state in its database after each MiB, and renames on the last byte",
		"both verify the SHA-256 on the server; the client computed it once before the runs (not timed)",
		"the emulated path (wanem) is between sshapi and the sshd; the HTTP client reaches sshapi on loopback",
	}
}

// TusSection writes the resumable upload report into a Markdown document.
func TusSection(w io.Writer, r *bench.TusReport) error {
	if r == nil || len(r.Runs) == 0 {
		return nil
	}
	return writeSection(w, "Resumable uploads (tus) beside a plain PUT",
		"One file uploaded through sshapi's tus endpoint (`/v1/systems/{id}/uploads`, what `sshapi put` uses from 64 MiB, the Python SDK with `resumable=True` and the web page) per PATCH size, beside one `curl -T` PUT of the same file to `…/content`. \"÷ curl PUT\" is the median MB/s divided by curl's on the same path (the goal is at least 0.8).",
		r.Meta.Notes, r.WriteMarkdown, "")
}

// paperTus runs the resumable upload section of `bench paper` (a file of o.TransferSize bytes;
// none when that is 0) after the rest of the paper was written, appending its section to
// benchmarks.md and its runs to benchmarks-tus.json under o.Out.
func paperTus(ctx context.Context, o Options) error {
	if o.TransferSize <= 0 {
		return nil
	}
	rep, err := RunTus(ctx, TusOptions{Size: o.TransferSize, Progress: o.Progress})
	if rep != nil && len(rep.Runs) > 0 {
		err = errors.Join(err, rep.WriteJSON(filepath.Join(o.Out, "benchmarks-tus.json")), appendSection(filepath.Join(o.Out, "benchmarks.md"), func(w io.Writer) error {
			return TusSection(w, rep)
		}))
	}
	if err != nil {
		return fmt.Errorf("resumable uploads: %w", err)
	}
	return nil
}

// appendSection appends what section writes to the Markdown file md, after a blank line.
func appendSection(md string, section func(io.Writer) error) error {
	f, err := os.OpenFile(md, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("append to %s: %w", md, err)
	}
	if _, err := io.WriteString(f, "\n"); err != nil {
		f.Close()
		return fmt.Errorf("append to %s: %w", md, err)
	}
	if err := errors.Join(section(f), f.Close()); err != nil {
		return fmt.Errorf("append to %s: %w", md, err)
	}
	return nil
}
