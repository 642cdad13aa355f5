package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/client"
)

// Targets of the resumable upload bench.
const (
	// TusCurlPut is one plain `curl -T` PUT of the file to …/content (the baseline).
	TusCurlPut = "curl PUT"
	// TusClient is the Go client's resumable upload (what `sshapi put` runs) through the tus
	// endpoint, with the run's chunk size.
	TusClient = "tus (sshapi put)"
)

// TusRun is one measured upload of the bench's file.
type TusRun struct {
	// Path names the network path between sshapi and the sshd ("loopback", "1 Gbit/s × 50ms").
	Path string `json:"path"`
	// Target is TusCurlPut or TusClient.
	Target string `json:"target"`
	// ChunkBytes is the most bytes per PATCH (TusClient; 0 for curl).
	ChunkBytes int64 `json:"chunk_bytes,omitempty"`
	// Round counts the repetitions from 1.
	Round   int     `json:"round"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
	// Error is why the run failed ("" if it did not).
	Error string `json:"error,omitempty"`
}

// TusReport is everything one resumable upload bench measured.
type TusReport struct {
	Meta Meta     `json:"meta"`
	Runs []TusRun `json:"runs"`
}

// TusBench measures uploads of one file through sshapi's tus endpoint beside a plain curl PUT
// of the same file to the same service and system.
type TusBench struct {
	// API is sshapi; System the system uploads go to.
	API    *API
	System string
	// Path names the network path in the report.
	Path string
	// Local is a local file of Size bytes; RemoteDir an absolute directory on the system that
	// the remote user may write.
	Local     string
	Size      int64
	RemoteDir string
	// Chunks are the PATCH sizes of the tus runs (0 = the whole file in one PATCH).
	Chunks []int64
	// Rounds repeats curl and each chunk size, interleaved (default 3).
	Rounds int
	// Curl is the curl binary (default "curl").
	Curl string
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Report receives the runs.
	Report *TusReport
}

// Run measures Rounds rounds of a curl PUT and a tus upload per chunk size, each uploading the
// whole file with its SHA-256 (X-Checksum-Sha256 for curl, the sha256 metadata for tus: the
// service verifies both), overwriting the previous copy. A failed run is recorded with its
// error; Run returns only ctx's error or a setup failure.
func (b *TusBench) Run(ctx context.Context) error {
	if b.Rounds <= 0 {
		b.Rounds = 3
	}
	if b.Curl == "" {
		b.Curl = "curl"
	}
	sum, err := fileSHA256(b.Local)
	if err != nil {
		return err
	}
	c := client.New(b.API.BaseURL, b.API.Token)
	c.HTTP = NewHTTPClient()
	// one listing first, so that no measured upload pays for the pool's first SSH connection
	if err := b.API.Call(ctx, "GET", "/v1/systems/"+url.PathEscape(b.System)+"/ls"+escapePath(b.RemoteDir), nil, 200, nil); err != nil {
		return fmt.Errorf("warm-up listing: %w", err)
	}
	for round := 1; round <= b.Rounds; round++ {
		b.measure(round, TusCurlPut, 0, func() error { return b.curlPut(ctx, sum) })
		for _, chunk := range b.Chunks {
			b.measure(round, TusClient, chunk, func() error { return b.tusUpload(ctx, c, sum, chunk) })
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (b *TusBench) remote(name string) string {
	return strings.TrimRight(b.RemoteDir, "/") + "/" + name
}

func (b *TusBench) measure(round int, target string, chunk int64, fn func() error) {
	start := time.Now()
	err := fn()
	r := TusRun{Path: b.Path, Target: target, ChunkBytes: chunk, Round: round, Bytes: b.Size, Seconds: time.Since(start).Seconds()}
	if err != nil {
		r.Error = err.Error()
	} else if r.Seconds > 0 {
		r.MBps = float64(b.Size) / 1e6 / r.Seconds
	}
	if b.Progress != nil {
		fmt.Fprintf(b.Progress, "tus %s round %d %s%s: %.1f MB/s in %.2fs %s\n", b.Path, round, target, chunkLabel(chunk, target), r.MBps, r.Seconds, r.Error)
	}
	b.Report.Runs = append(b.Report.Runs, r)
}

// curlPut runs the README's verified upload: curl -T with X-Checksum-Sha256.
func (b *TusBench) curlPut(ctx context.Context, sum string) error {
	u := strings.TrimRight(b.API.BaseURL, "/") + contentPath(b.System, b.remote("curl.bin")) + "?overwrite=true"
	cmd := exec.CommandContext(ctx, b.Curl, "-sS", "--fail-with-body", "-o", "/dev/null", "-T", b.Local, u,
		"-H", "Authorization: Bearer "+b.API.Token, "-H", "X-Checksum-Sha256: "+sum)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("curl PUT: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (b *TusBench) tusUpload(ctx context.Context, c *client.Client, sum string, chunk int64) error {
	f, err := os.Open(b.Local)
	if err != nil {
		return fmt.Errorf("tus upload: %w", err)
	}
	defer f.Close()
	if chunk <= 0 {
		chunk = b.Size
	}
	if err := c.UploadResumable(ctx, b.System, b.remote("tus.bin"), f, b.Size, client.ResumableOptions{SHA256: sum, Overwrite: true, ChunkSize: chunk, Retries: 1}); err != nil {
		return fmt.Errorf("tus upload: %w", err)
	}
	return nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("sha256: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("sha256 of %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func chunkLabel(chunk int64, target string) string {
	if target != TusClient {
		return ""
	}
	if chunk <= 0 {
		return ", one PATCH"
	}
	return fmt.Sprintf(", %d MiB PATCHes", chunk>>20)
}

// TusSummary is the median of one target's rounds on one path, and its ratio to curl's.
type TusSummary struct {
	Path       string  `json:"path"`
	Target     string  `json:"target"`
	ChunkBytes int64   `json:"chunk_bytes,omitempty"`
	Rounds     int     `json:"rounds"`
	Failed     int     `json:"failed"`
	MedianMBps float64 `json:"median_mb_per_s"`
	MinMBps    float64 `json:"min_mb_per_s"`
	MaxMBps    float64 `json:"max_mb_per_s"`
	// VsCurl is MedianMBps divided by curl's median on the same path (0 when unknown).
	VsCurl float64 `json:"vs_curl"`
}

// Summaries are the report's medians per path and target, in the order first measured.
func (r *TusReport) Summaries() []TusSummary {
	type key struct {
		path, target string
		chunk        int64
	}
	var order []key
	vals := map[key][]float64{}
	failed := map[key]int{}
	for _, run := range r.Runs {
		k := key{run.Path, run.Target, run.ChunkBytes}
		if _, ok := vals[k]; !ok && failed[k] == 0 {
			order = append(order, k)
		}
		if run.Error != "" {
			failed[k]++
			continue
		}
		vals[k] = append(vals[k], run.MBps)
	}
	curl := map[string]float64{}
	var out []TusSummary
	for _, k := range order {
		v := slices.Clone(vals[k])
		slices.Sort(v)
		s := TusSummary{Path: k.path, Target: k.target, ChunkBytes: k.chunk, Rounds: len(v) + failed[k], Failed: failed[k]}
		if len(v) > 0 {
			s.MinMBps, s.MaxMBps = v[0], v[len(v)-1]
			s.MedianMBps = v[len(v)/2]
			if len(v)%2 == 0 {
				s.MedianMBps = (v[len(v)/2-1] + v[len(v)/2]) / 2
			}
		}
		if k.target == TusCurlPut {
			curl[k.path] = s.MedianMBps
		}
		out = append(out, s)
	}
	for i := range out {
		if c := curl[out[i].Path]; c > 0 {
			out[i].VsCurl = out[i].MedianMBps / c
		}
	}
	return out
}

// WriteMarkdown writes the medians as a table.
func (r *TusReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| path | client | PATCH size | rounds | failed | median MB/s | min–max MB/s | ÷ curl PUT |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Summaries() {
		size, ratio := "–", "–"
		if s.Target == TusClient {
			size = "whole file"
			if s.ChunkBytes > 0 {
				size = fmt.Sprintf("%d MiB", s.ChunkBytes>>20)
			}
			if s.VsCurl > 0 {
				ratio = fmt.Sprintf("%.2f×", s.VsCurl)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %.1f | %.1f–%.1f | %s |\n", s.Path, s.Target, size, s.Rounds, s.Failed, s.MedianMBps, s.MinMBps, s.MaxMBps, ratio)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report, with its summaries, to path.
func (r *TusReport) WriteJSON(path string) error {
	return writeJSON(path, struct {
		*TusReport
		Summaries []TusSummary `json:"summaries"`
	}{r, r.Summaries()})
}

// ErrNoCurl is returned when the curl binary the bench compares with cannot be found.
var ErrNoCurl = errors.New("curl not found (install curl: scripts/install-deps)")

// LookCurl returns the path of curl, or ErrNoCurl.
func LookCurl() (string, error) {
	p, err := exec.LookPath("curl")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoCurl, err)
	}
	return p, nil
}
