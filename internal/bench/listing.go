package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/shell"
)

// Listing targets beside sshapi: OpenSSH clients over one ControlMaster connection.
const (
	// PeerMuxFind runs `find DIR -mindepth 1 -maxdepth 1 -printf '…'`, the metadata sshapi's
	// listing needs, in one NUL-separated stream (the command sshapi itself runs for large
	// directories).
	PeerMuxFind = "openssh-mux find -printf"
	// PeerMuxLsLa runs `ls -la DIR`.
	PeerMuxLsLa = "openssh-mux ls -la"
)

// ListingRun is one measured run: Listings listings of one directory, Concurrency at a time.
type ListingRun struct {
	// Target is sshapi, a variant ("sshapi sftp-only") or a peer.
	Target string `json:"target"`
	// Entries in the directory; Concurrency is how many listings were in flight at once.
	Entries     int `json:"entries"`
	Concurrency int `json:"concurrency"`
	// Listings attempted and Failed of them; Seconds of wall time for all.
	Listings int     `json:"listings"`
	Failed   int     `json:"failed"`
	Seconds  float64 `json:"seconds"`
	// PerSecond is successful listings per second of wall time.
	PerSecond float64 `json:"listings_per_s"`
	// P50, P90 and P99 are the successful listings' latencies in milliseconds.
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	// CPUMs is the bench process's user+system CPU (sshapi when self-hosted, the load
	// generator, the OpenSSH clients) per successful listing, in milliseconds; SSHDCPUMs that of
	// the sshd process tree, sampled from /proc (see cpuMeter).
	CPUMs     float64 `json:"cpu_ms_per_listing"`
	SSHDCPUMs float64 `json:"sshd_cpu_ms_per_listing,omitempty"`
	// Error is the first failure's message.
	Error string `json:"error,omitempty"`
}

// ListingReport is everything one listing bench measured.
type ListingReport struct {
	Meta Meta         `json:"meta"`
	Runs []ListingRun `json:"runs"`
}

// ListingTarget is one way to list the directory: Op lists it once and fails unless the whole
// listing arrived.
type ListingTarget struct {
	Name string
	Op   Op
}

// APIListOp returns an Op that lists dir on system through GET /v1/systems/{id}/ls/{path} (full
// metadata JSON) in one page of up to limit entries and reads the whole answer.
func (a *API) APIListOp(system, dir string, limit int) Op {
	path := listPath(system, dir, limit)
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(a.BaseURL, "/")+path, nil)
		if err != nil {
			return fmt.Errorf("build request: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+a.Token)
		resp, err := a.client().Do(req)
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
			return &StatusError{Code: resp.StatusCode, Detail: strings.TrimSpace(string(msg))}
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return fmt.Errorf("list: read: %w", err)
		}
		return nil
	}
}

// CountEntries lists dir on system once through the API and returns how many entries the
// answer holds and the total the service reports.
func (a *API) CountEntries(ctx context.Context, system, dir string, limit int) (entries, total int, err error) {
	var l struct {
		Entries []json.RawMessage `json:"entries"`
		Total   int               `json:"total"`
	}
	if err := a.Call(ctx, http.MethodGet, listPath(system, dir, limit), nil, http.StatusOK, &l); err != nil {
		return 0, 0, fmt.Errorf("list %s: %w", dir, err)
	}
	return len(l.Entries), l.Total, nil
}

func listPath(system, dir string, limit int) string {
	return "/v1/systems/" + url.PathEscape(system) + "/ls" + escapePath(dir) + fmt.Sprintf("?limit=%d", limit)
}

// escapePath turns an absolute remote path into URL path segments ("/a b/c" → "/a%20b/c").
func escapePath(p string) string {
	segs := strings.Split(strings.Trim(p, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/" + strings.Join(segs, "/")
}

// ListingCommands are the OpenSSH peers' remote commands for listing dir, by peer name.
func ListingCommands(dir string) map[string]string {
	q := shell.Quote(dir)
	return map[string]string{
		PeerMuxFind: "find -H " + q + ` -mindepth 1 -maxdepth 1 -printf '%f\0%y%m\0%s\0%T@\0%U\0%G\0%l\0'`,
		PeerMuxLsLa: "ls -la " + q,
	}
}

// MuxListingTargets opens one ControlMaster connection to e and returns the OpenSSH listing
// targets of dir over it (PeerMuxFind, PeerMuxLsLa) and the function that closes it.
func MuxListingTargets(ctx context.Context, e SSHEndpoint, dir string) ([]ListingTarget, func() error, error) {
	mux := NewMux(e, 1)
	if err := mux.Start(ctx); err != nil {
		return nil, nil, err
	}
	cmds := ListingCommands(dir)
	var out []ListingTarget
	for _, p := range []string{PeerMuxFind, PeerMuxLsLa} {
		out = append(out, ListingTarget{Name: p, Op: mux.Op(cmds[p])})
	}
	return out, mux.Stop, nil
}

// ListingBench lists one directory through each target at each concurrency, targets
// interleaved per concurrency.
type ListingBench struct {
	Targets []ListingTarget
	// Entries is the directory's size, for the report.
	Entries int
	// Concurrency levels (default 1 and 50).
	Concurrency []int
	// Listings per run (default 40); at concurrency c at least Rounds × c (Rounds default 4).
	Listings, Rounds int
	// Warmup listings (8 at a time, unmeasured) before a target's first run (default 8).
	Warmup int
	// Timeout bounds one listing (default 60s).
	Timeout time.Duration
	// SSHDPIDs are the sshd master processes whose CPU is reported (none: not reported).
	SSHDPIDs []int
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Report receives the runs.
	Report *ListingReport
}

// Run measures every target at every concurrency. A failed listing is counted in its run; Run
// returns only ctx's error.
func (b *ListingBench) Run(ctx context.Context) error {
	if len(b.Targets) == 0 {
		return errNoListing
	}
	if len(b.Concurrency) == 0 {
		b.Concurrency = []int{1, 50}
	}
	if b.Listings <= 0 {
		b.Listings = 40
	}
	if b.Rounds <= 0 {
		b.Rounds = 4
	}
	if b.Warmup <= 0 {
		b.Warmup = 8
	}
	if b.Timeout <= 0 {
		b.Timeout = time.Minute
	}
	for _, t := range b.Targets {
		b.listMany(ctx, t.Op, b.Warmup, min(b.Warmup, 8))
	}
	for _, c := range b.Concurrency {
		for _, t := range b.Targets {
			if err := ctx.Err(); err != nil {
				return err
			}
			b.measure(ctx, t, c)
		}
	}
	return ctx.Err()
}

// measure runs max(Listings, Rounds × c) listings of t, c at a time, and records the run.
func (b *ListingBench) measure(ctx context.Context, t ListingTarget, c int) {
	n := max(b.Listings, b.Rounds*c)
	cpu0 := selfCPU()
	var meter *cpuMeter
	if len(b.SSHDPIDs) > 0 {
		meter = startCPUMeter(b.SSHDPIDs)
	}
	start := time.Now()
	lat, errs := b.listMany(ctx, t.Op, n, c)
	el := time.Since(start).Seconds()
	r := ListingRun{Target: t.Name, Entries: b.Entries, Concurrency: c, Listings: n, Failed: len(errs), Seconds: el}
	var sshd float64
	if meter != nil {
		sshd = meter.Stop()
	}
	cpu := selfCPU() - cpu0 - meter.Own()
	if ok := len(lat); ok > 0 {
		r.PerSecond = float64(ok) / el
		r.P50, r.P90, r.P99 = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)
		r.CPUMs = 1000 * cpu / float64(ok)
		r.SSHDCPUMs = 1000 * sshd / float64(ok)
	}
	if len(errs) > 0 {
		r.Error = truncate(errs[0].Error(), 300)
	}
	if b.Progress != nil {
		fmt.Fprintf(b.Progress, "listing %d entries %s ×%d: %d/%d ok, %.1f listings/s, p50 %.1f ms, p90 %.1f ms, cpu %.1f ms, sshd cpu %.1f ms per listing %s\n",
			b.Entries, t.Name, c, n-len(errs), n, r.PerSecond, r.P50, r.P90, r.CPUMs, r.SSHDCPUMs, r.Error)
	}
	b.Report.Runs = append(b.Report.Runs, r)
}

// listMany runs op n times, c at a time, and returns the successful calls' latencies in
// milliseconds and the failures.
func (b *ListingBench) listMany(ctx context.Context, op Op, n, c int) ([]float64, []error) {
	var mu sync.Mutex
	var lat []float64
	var errs []error
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	var wg sync.WaitGroup
	for range min(c, n) {
		wg.Go(func() {
			for range next {
				if ctx.Err() != nil {
					return
				}
				octx, cancel := context.WithTimeout(ctx, b.Timeout)
				t0 := time.Now()
				err := op(octx)
				d := time.Since(t0)
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					lat = append(lat, float64(d.Microseconds())/1000)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, errs
}

// percentile is the nearest-rank q-th percentile of vs (sorted in place).
func percentile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	i := int(math.Ceil(q/100*float64(len(vs)))) - 1
	return vs[max(0, min(i, len(vs)-1))]
}

// WriteMarkdown writes one table per concurrency level: every target with its rate, latency
// and CPU per listing, and its rate divided by sshapi's.
func (r *ListingReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	var levels []int
	for _, s := range r.Runs {
		if !slices.Contains(levels, s.Concurrency) {
			levels = append(levels, s.Concurrency)
		}
	}
	for _, c := range levels {
		var runs []ListingRun
		var base *ListingRun
		for i, s := range r.Runs {
			if s.Concurrency == c {
				runs = append(runs, s)
				if s.Target == BaselineTarget {
					base = &r.Runs[i]
				}
			}
		}
		fmt.Fprintf(&b, "#### Listing a directory of %d entries, %d at a time\n\n", runs[0].Entries, c)
		b.WriteString("| target | listings | failed | listings/s | p50 ms | p90 ms | p99 ms | CPU ms per listing (bench process) | sshd CPU ms per listing | listings/s ÷ sshapi |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range runs {
			ok := s.Listings - s.Failed
			sshd, ratioS := "–", "–"
			if s.SSHDCPUMs > 0 {
				sshd = fmt.Sprintf("%.1f", s.SSHDCPUMs)
			}
			if base != nil && base.PerSecond > 0 && ok > 0 {
				ratioS = fmt.Sprintf("%.2f×", s.PerSecond/base.PerSecond)
			}
			failed := fmt.Sprint(s.Failed)
			if s.Error != "" {
				failed += ": " + truncate(strings.ReplaceAll(s.Error, "|", "/"), 80)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %.1f | %s | %s | %s | %.1f | %s | %s |\n", s.Target, s.Listings, failed, s.PerSecond,
				ms(s.P50, ok), ms(s.P90, ok), ms(s.P99, ok), s.CPUMs, sshd, ratioS)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report to path.
func (r *ListingReport) WriteJSON(path string) error {
	return writeJSON(path, r)
}

// writeJSON writes v as indented JSON to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// errNoListing is returned for a listing bench without targets.
var errNoListing = errors.New("listing bench: no targets")
