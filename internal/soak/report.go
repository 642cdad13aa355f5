package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Report is a soak run's outcome: per phase and overall request outcomes and latency, the fault
// windows, the checks of everything acknowledged, and the instances' memory over time.
type Report struct {
	Options Options   `json:"options"`
	Started time.Time `json:"started"`
	Elapsed string    `json:"elapsed"`
	Windows []Window  `json:"windows"`
	Phases  []Phase   `json:"phases"`
	Overall Phase     `json:"overall"`
	Check   Check     `json:"check"`
	// Unexpected5xx are 5xx answers (other than 503 with Retry-After) to requests that did not
	// overlap any fault window.
	Unexpected5xx    []string `json:"unexpected_5xx"`
	TransferProblems []string `json:"transfer_problems"`
	// TransportErrors are requests without an HTTP answer (connection refused or dropped), by phase.
	TransportErrors []string `json:"transport_errors"`
	// Errors5xx are every 5xx answer, by phase, operation, status and body.
	Errors5xx []Error5xx `json:"errors_5xx"`
	Samples   []Sample   `json:"samples"`
	DBSamples []DBSample `json:"db_samples"`
	// LoadStart is when the load began; Timeline has every request relative to it.
	LoadStart time.Time `json:"load_start"`
	Timeline  []Point   `json:"timeline"`
}

// Phase is the requests that overlapped one fault window, or none (baseline).
type Phase struct {
	Name     string         `json:"name"`
	Requests int            `json:"requests"`
	Outcomes map[string]int `json:"outcomes"`
	ByOp     map[string]int `json:"by_op"`
	// WellFormed503 counts 503 answers with Retry-After (the API's or the balancer's "come back
	// later"); Other5xx every other 5xx answer.
	WellFormed503 int     `json:"well_formed_503"`
	Other5xx      int     `json:"other_5xx"`
	P50ms         float64 `json:"p50_ms"`
	P99ms         float64 `json:"p99_ms"`
	Maxms         float64 `json:"max_ms"`
}

// Check is what was verified after the load.
type Check struct {
	UploadsAcknowledged   int      `json:"uploads_acknowledged"`
	UploadsLost           []string `json:"uploads_lost"`
	UploadsCorrupt        []string `json:"uploads_corrupt"`
	DownloadsCorrupt      []string `json:"downloads_corrupt"`
	TransfersAcknowledged int      `json:"transfers_acknowledged"`
	TransfersSucceeded    int      `json:"transfers_succeeded"`
	TransfersMismatched   []string `json:"transfers_mismatched"`
	AuditExpected         int      `json:"audit_expected"`
	AuditMissing          []string `json:"audit_missing"`
	// AuditDuplicated are acknowledged actions with more than one entry.
	AuditDuplicated []string `json:"audit_duplicated"`
	AuditError      string   `json:"audit_error,omitempty"`
	// Leftovers are the temporary files still on the servers once the load stopped and the
	// instances had cleanupWait to sweep what failed requests left (a killed instance's upload,
	// an upload whose SSH connection died).
	Leftovers []string `json:"leftover_part_files"`
	// LeftoversAtStop is how many temporary files there were when the load stopped, and
	// CleanupSeconds how long they took to go.
	LeftoversAtStop int     `json:"leftover_part_files_at_stop"`
	CleanupSeconds  float64 `json:"cleanup_seconds"`
	// DiskFull describes each write into the full filesystem (FaultDiskFull) and how it ended;
	// DiskFullBad those that were not a clear refusal, left a file, or did not finish.
	DiskFull    []string `json:"disk_full"`
	DiskFullBad []string `json:"disk_full_bad"`
}

// Error5xx counts 5xx answers alike in phase, operation, status, Retry-After and body.
type Error5xx struct {
	Phase      string `json:"phase"`
	Op         string `json:"op"`
	Status     int    `json:"status"`
	RetryAfter bool   `json:"retry_after"`
	Detail     string `json:"detail"`
	Count      int    `json:"count"`
}

// overlaps reports whether a request (start, latency) overlapped window w.
func overlaps(res result, w Window) bool {
	end := res.start.Add(res.latency)
	return !end.Before(w.Start) && !res.start.After(w.End)
}

func (rep *Report) summarize(results []result, ws []Window) {
	byPhase := map[string][]result{}
	for _, res := range results {
		name := baselinePhase
		for _, w := range ws {
			if overlaps(res, w) {
				name = w.Name
				break
			}
		}
		byPhase[name] = append(byPhase[name], res)
		if strings.HasPrefix(res.kind, "not sent") {
			continue
		}
		rep.Timeline = append(rep.Timeline, Point{T: round1(res.start.Sub(rep.LoadStart).Seconds()),
			Ms: round1(float64(res.latency.Microseconds()) / 1000), Op: res.op, OK: res.kind == "ok"})
		if res.kind == "transport" {
			rep.TransportErrors = append(rep.TransportErrors, fmt.Sprintf("%s: %s at %s after %s: %s", name, res.op,
				res.start.UTC().Format("15:04:05.000"), res.latency.Round(time.Millisecond), res.detail))
		}
		if res.status >= 500 && res.kind != "ok" {
			e := Error5xx{Phase: name, Op: res.op, Status: res.status, RetryAfter: res.retryAf, Detail: generic(res.detail)}
			found := false
			for i := range rep.Errors5xx {
				if k := rep.Errors5xx[i]; k.Phase == e.Phase && k.Op == e.Op && k.Status == e.Status && k.RetryAfter == e.RetryAfter && k.Detail == e.Detail {
					rep.Errors5xx[i].Count++
					found = true
				}
			}
			if !found {
				e.Count = 1
				rep.Errors5xx = append(rep.Errors5xx, e)
			}
		}
		if name == baselinePhase && res.status >= 500 && res.kind != "ok" && !(res.status == 503 && res.retryAf) {
			rep.Unexpected5xx = append(rep.Unexpected5xx, fmt.Sprintf("%s %s at %s after %s: %s", res.op, res.kind,
				res.start.UTC().Format("15:04:05.000"), res.latency.Round(time.Millisecond), res.detail))
		}
	}
	names := []string{baselinePhase}
	for _, w := range ws {
		names = append(names, w.Name)
	}
	for _, n := range names {
		rep.Phases = append(rep.Phases, phase(n, byPhase[n]))
	}
	rep.Overall = phase("overall", results)
}

func phase(name string, rs []result) Phase {
	p := Phase{Name: name, Requests: len(rs), Outcomes: map[string]int{}, ByOp: map[string]int{}}
	var lat []float64
	for _, r := range rs {
		p.Outcomes[r.kind]++
		p.ByOp[r.op]++
		switch {
		case r.status == 503 && r.retryAf:
			p.WellFormed503++
		case r.status >= 500 && r.kind != "ok": // not an expected answer (507 for a full disk)
			p.Other5xx++
		}
		if r.status != 0 {
			lat = append(lat, float64(r.latency.Microseconds())/1000)
		}
	}
	sort.Float64s(lat)
	if len(lat) > 0 {
		p.P50ms, p.P99ms, p.Maxms = quantile(lat, 0.5), quantile(lat, 0.99), lat[len(lat)-1]
	}
	return p
}

func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// Failures lists what makes the run fail: loss, corruption, a missing audit entry, a leftover
// temporary file, an unexpected 5xx, or an acknowledged transfer that did not succeed.
func (rep *Report) Failures() []string {
	var out []string
	c := rep.Check
	add := func(n int, what string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(len(c.UploadsLost), "acknowledged uploads lost")
	add(len(c.UploadsCorrupt), "acknowledged uploads corrupt")
	add(len(c.DownloadsCorrupt), "downloads differing from their upload")
	add(len(c.TransfersMismatched), "succeeded transfers with different SHA-256 at the ends")
	add(len(rep.TransferProblems), "acknowledged transfers that did not succeed")
	add(len(c.AuditMissing), "audit entries missing")
	add(len(c.AuditDuplicated), "audit entries duplicated")
	add(len(c.Leftovers), "leftover .part files")
	add(len(c.DiskFullBad), "writes into a full filesystem not refused cleanly")
	add(len(rep.Unexpected5xx), "unexpected 5xx outside fault windows")
	if c.AuditError != "" {
		out = append(out, "audit not read: "+c.AuditError)
	}
	for _, w := range rep.Windows {
		if w.Error != "" {
			out = append(out, "fault "+w.Name+" not injected: "+w.Error)
		}
	}
	return out
}

// WriteJSON writes the report to path.
func (rep *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteMarkdown writes the report's tables.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	o := rep.Options
	db := "one PostgreSQL"
	for _, f := range o.Faults {
		if f == FaultFailover {
			db = "a PostgreSQL primary with a streaming replica"
		}
	}
	fmt.Fprintf(&b, "## Soak: %d instances behind HAProxy on %s, %.0f req/s for %s, a fault every %s\n\n",
		o.Instances, db, o.Rate, o.Duration, o.FaultEvery)
	fmt.Fprintf(&b, "Faults in turn: %s.\n\n", strings.Join(o.Faults, ", "))
	fmt.Fprintf(&b, "Started %s, took %s.\n\n", rep.Started.UTC().Format(time.RFC3339), rep.Elapsed)
	b.WriteString("### Fault windows\n\n| window | start (UTC) | end | length | error | note |\n|---|---|---|---:|---|---|\n")
	for _, win := range rep.Windows {
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f s | %s | %s |\n", win.Name, win.Start.UTC().Format("15:04:05.0"),
			win.End.UTC().Format("15:04:05.0"), win.End.Sub(win.Start).Seconds(), win.Error, strings.ReplaceAll(win.Note, "|", "\\|"))
	}
	b.WriteString("\n### Requests per phase (a request belongs to the window it overlapped)\n\n| phase | requests | p50 ms | p99 ms | max ms | 503 + Retry-After | other 5xx | outcomes |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, p := range append(append([]Phase{}, rep.Phases...), rep.Overall) {
		var oc []string
		for _, k := range sortedKeys(p.Outcomes) {
			oc = append(oc, fmt.Sprintf("%s %d", k, p.Outcomes[k]))
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.1f | %d | %d | %s |\n", p.Name, p.Requests, p.P50ms, p.P99ms, p.Maxms,
			p.WellFormed503, p.Other5xx, strings.Join(oc, ", "))
	}
	c := rep.Check
	b.WriteString("\n### Checks\n\n| check | count | bad |\n|---|---:|---:|\n")
	fmt.Fprintf(&b, "| acknowledged uploads read back (disk and API), SHA-256 compared | %d | lost %d, corrupt %d |\n", c.UploadsAcknowledged, len(c.UploadsLost), len(c.UploadsCorrupt))
	fmt.Fprintf(&b, "| downloads and link downloads compared with their upload during the load | %d ops | %d |\n", rep.Overall.ByOp["download"]+rep.Overall.ByOp["link"], len(c.DownloadsCorrupt))
	fmt.Fprintf(&b, "| acknowledged transfers succeeded | %d of %d | %d not succeeded |\n", c.TransfersSucceeded, c.TransfersAcknowledged, len(rep.TransferProblems))
	fmt.Fprintf(&b, "| succeeded transfers, SHA-256 of both ends on disk | %d | %d differ |\n", c.TransfersSucceeded, len(c.TransfersMismatched))
	fmt.Fprintf(&b, "| audit entries for acknowledged uploads, transfers, links and link downloads, each exactly once | %d | %d missing, %d duplicated |\n", c.AuditExpected, len(c.AuditMissing), len(c.AuditDuplicated))
	fmt.Fprintf(&b, "| temporary `.*.sshapi-*.part` files of failed requests when the load stopped, removed by the instances within %.1f s | %d | %d left |\n",
		c.CleanupSeconds, c.LeftoversAtStop, len(c.Leftovers))
	if len(c.DiskFull) > 0 {
		fmt.Fprintf(&b, "| writes into a full filesystem refused cleanly (507/4xx, nothing left) or finished verified | %d | %d |\n", len(c.DiskFull), len(c.DiskFullBad))
	}
	fmt.Fprintf(&b, "| 5xx outside fault windows (not 503 + Retry-After) | | %d |\n", len(rep.Unexpected5xx))
	if len(c.DiskFull) > 0 {
		b.WriteString("\n### Writes into the full filesystem\n\n")
		for _, l := range c.DiskFull {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	if len(rep.Errors5xx) > 0 {
		b.WriteString("\n### 5xx answers\n\n| phase | op | status | Retry-After | count | body |\n|---|---|---:|---|---:|---|\n")
		for _, e := range rep.Errors5xx {
			fmt.Fprintf(&b, "| %s | %s | %d | %v | %d | %s |\n", e.Phase, e.Op, e.Status, e.RetryAfter, e.Count, strings.ReplaceAll(e.Detail, "|", "\\|"))
		}
	}
	if len(rep.TransportErrors) > 0 {
		b.WriteString("\n### Requests without an HTTP answer\n\n")
		for _, e := range rep.TransportErrors {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	b.WriteString("\n### Instances (from /proc and /metrics, every 2 s)\n\n| instance | samples | pids | RSS first → last (max) MiB | threads first → last (max) | goroutines first → last (max) | open files first → last (max) |\n|---|---:|---|---|---|---|---|\n")
	by := map[string][]Sample{}
	for _, s := range rep.Samples {
		by[s.Instance] = append(by[s.Instance], s)
	}
	for _, name := range sortedKeys(by) {
		ss := by[name]
		pids := map[int]bool{}
		var maxRSS int64
		maxTh, maxG, maxF := 0, 0, 0
		for _, s := range ss {
			pids[s.PID] = true
			maxRSS = max(maxRSS, s.RSSBytes)
			maxTh, maxG, maxF = max(maxTh, s.Threads), max(maxG, s.Goroutines), max(maxF, s.OpenFiles)
		}
		first, last := ss[0], ss[len(ss)-1]
		fmt.Fprintf(&b, "| %s | %d | %d | %.0f → %.0f (%.0f) | %d → %d (%d) | %d → %d (%d) | %d → %d (%d) |\n", name, len(ss), len(pids),
			mib(first.RSSBytes), mib(last.RSSBytes), mib(maxRSS), first.Threads, last.Threads, maxTh,
			first.Goroutines, last.Goroutines, maxG, first.OpenFiles, last.OpenFiles, maxF)
	}
	if n := len(rep.DBSamples); n > 0 {
		maxC := 0
		for _, s := range rep.DBSamples {
			maxC = max(maxC, s.Connections)
		}
		fmt.Fprintf(&b, "\nConnections to the soak database on the primary: %d first, %d last, %d at most (%d samples).\n",
			rep.DBSamples[0].Connections, rep.DBSamples[n-1].Connections, maxC, n)
	}
	if f := rep.Failures(); len(f) > 0 {
		b.WriteString("\n### Problems\n\n")
		for _, s := range f {
			fmt.Fprintf(&b, "- %s\n", s)
		}
		for _, list := range [][]string{c.UploadsLost, c.UploadsCorrupt, c.DownloadsCorrupt, c.TransfersMismatched, rep.TransferProblems, c.AuditMissing, c.Leftovers, c.DiskFullBad, rep.Unexpected5xx} {
			for i, s := range list {
				if i == 10 {
					fmt.Fprintf(&b, "  - … %d more\n", len(list)-10)
					break
				}
				fmt.Fprintf(&b, "  - %s\n", s)
			}
		}
	} else {
		b.WriteString("\nNothing lost, corrupt, unaudited or left over; no unexpected 5xx.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

var (
	requestID    = regexp.MustCompile(`request id [^)"]*`)
	instanceURL  = regexp.MustCompile(`,?"instance":"[^"]*"`)
	soakFileName = regexp.MustCompile(`soak-[a-z-]+-[0-9]+`)
)

// generic drops what differs between otherwise alike 5xx bodies (request ids, the soak's file
// names, the problem's instance), so that the report counts them together.
func generic(detail string) string {
	detail = requestID.ReplaceAllString(detail, "request id …")
	detail = instanceURL.ReplaceAllString(detail, "")
	return soakFileName.ReplaceAllString(detail, "soak-…")
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func mib(n int64) float64 { return float64(n) / (1 << 20) }
