package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/openloop"
)

// Cases of the clients bench: small requests with a fixed number of clients, each sending its
// next request as soon as its last one is answered (closed loop).
const (
	// CaseChecksum is the SHA-256 of an 8-byte file: sshapi's GET …/checksum/{path}, the peers'
	// `sha256sum FILE` on a pooled connection.
	CaseChecksum = "checksum"
	// CaseUptime is `uptime`: sshapi's POST /v1/systems/{id}/commands, the peers' `uptime` on a
	// pooled connection.
	CaseUptime = "uptime"
	// CaseLs is a listing of a directory of LsEntries empty files: sshapi's GET
	// /v1/systems/{id}/ls/{path} (full metadata JSON), the peers' `ls -la DIR` on a pooled
	// connection.
	CaseLs = "ls"
)

// LsEntries is the size of the directory CaseLs lists.
const LsEntries = 10

// ClientsRun is one closed-loop run: Clients clients sending one kind of request to one target
// for a while.
type ClientsRun struct {
	// Case is CaseChecksum, CaseUptime or CaseLs; Target is sshapi or a peer; Request says what exactly
	// the target was asked.
	Case    string `json:"case"`
	Target  string `json:"target"`
	Request string `json:"request"`
	Clients int    `json:"clients"`
	// Round is the round of the run (1 when ClientsBench.Rounds is 1; see there).
	Round int `json:"round,omitempty"`
	// Summary holds the counts, the achieved rate (successful requests per second of wall time)
	// and the latency percentiles (from each request's send: a closed loop has no schedule).
	Summary openloop.Summary `json:"summary"`
	// CPUMs is the bench process's user+system CPU (sshapi when self-hosted, the load generator,
	// waited-for children) per successful request; SSHDCPUMs that of the sshd process tree;
	// PeerCPUMs that of the peer's own process (a Python peer), each in milliseconds.
	CPUMs     float64 `json:"cpu_ms_per_request"`
	SSHDCPUMs float64 `json:"sshd_cpu_ms_per_request,omitempty"`
	PeerCPUMs float64 `json:"peer_cpu_ms_per_request,omitempty"`
	// SettledS is how long the run waited for a quiet machine before its warm-up
	// (ClientsBench.Settle); Unquiet says the machine was still busy when it gave up waiting.
	SettledS float64 `json:"settled_s,omitempty"`
	Unquiet  bool    `json:"started_unquiet,omitempty"`
}

// ClientsReport is everything one clients bench measured.
type ClientsReport struct {
	Meta Meta         `json:"meta"`
	Runs []ClientsRun `json:"runs"`
}

// ClientsTarget is one way to make a request of a case: Op makes it once.
type ClientsTarget struct {
	Case, Name, Request string
	Op                  Op
	// PIDs are processes of the target outside the bench process (a Python peer) whose CPU is
	// reported as the peer's.
	PIDs []int
}

// ClientsBench runs each target with Clients clients for Duration, targets of a case
// interleaved in the order given, Rounds times.
type ClientsBench struct {
	Targets []ClientsTarget
	// Clients sending at once (default 50); Duration of each run (default 10s); Timeout of one
	// request (default 30s); Warmup requests before a target's run, Clients at a time (default
	// 2 × Clients).
	Clients  int
	Duration time.Duration
	Timeout  time.Duration
	Warmup   int
	// Rounds is how many times every target runs (at least 1): a case's rounds one after the
	// other, its targets in the order given in odd rounds and in reverse in even ones (ABBA),
	// so that neither side always runs first on a machine whose state drifts from one run to
	// the next.
	Rounds int
	// SSHDPIDs are the sshd master processes whose CPU is reported (none: not reported).
	SSHDPIDs []int
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Report receives the runs.
	Report *ClientsReport
	// Profiles, when set, is a directory that receives a CPU profile of the bench process (which
	// hosts sshapi) for each sshapi run, named clients-CASE.pprof (clients-CASE-rN.pprof for
	// rounds after the first).
	Profiles string
	// Settle, when set, is called before each run's warm-up and waits for the machine to be
	// quiet, returning how long it waited and whether it got quiet, so that no run shares the
	// CPUs with what the run before it left winding down (its sessions' processes, a peer's
	// process finishing its work).
	Settle func(ctx context.Context) (waited time.Duration, quiet bool)
}

// Run measures every target. A failed request is counted in its run; Run returns only ctx's
// error.
func (b *ClientsBench) Run(ctx context.Context) error {
	if b.Clients <= 0 {
		b.Clients = 50
	}
	if b.Duration <= 0 {
		b.Duration = 10 * time.Second
	}
	if b.Timeout <= 0 {
		b.Timeout = 30 * time.Second
	}
	if b.Warmup <= 0 {
		b.Warmup = 2 * b.Clients
	}
	var cases []string
	byCase := map[string][]ClientsTarget{}
	for _, t := range b.Targets {
		if _, ok := byCase[t.Case]; !ok {
			cases = append(cases, t.Case)
		}
		byCase[t.Case] = append(byCase[t.Case], t)
	}
	for _, c := range cases {
		for round := 1; round <= max(1, b.Rounds); round++ {
			ts := slices.Clone(byCase[c])
			if round%2 == 0 {
				slices.Reverse(ts)
			}
			for _, t := range ts {
				if err := ctx.Err(); err != nil {
					return err
				}
				b.measure(ctx, t, round)
			}
		}
	}
	return ctx.Err()
}

func (b *ClientsBench) measure(ctx context.Context, t ClientsTarget, round int) {
	var settled time.Duration
	quiet := true
	if b.Settle != nil {
		settled, quiet = b.Settle(ctx)
	}
	_ = ClosedLoop(ctx, t.Op, b.Clients, b.Warmup, 0, b.Timeout) // warm-up, not recorded
	cpu0 := selfCPU()
	peer0 := treeCPU(t.PIDs)
	var meter *cpuMeter
	if len(b.SSHDPIDs) > 0 {
		meter = startCPUMeter(b.SSHDPIDs)
	}
	stopProfile := func() {}
	if b.Profiles != "" && t.Name == BaselineTarget {
		name := "clients-" + t.Case + ".pprof"
		if round > 1 {
			name = fmt.Sprintf("clients-%s-r%d.pprof", t.Case, round)
		}
		stopProfile = startCPUProfile(filepath.Join(b.Profiles, name))
	}
	s := ClosedLoop(ctx, t.Op, b.Clients, 0, b.Duration, b.Timeout)
	stopProfile()
	var sshd float64
	if meter != nil {
		sshd = meter.Stop()
	}
	cpu := selfCPU() - cpu0 - meter.Own()
	peer := treeCPU(t.PIDs) - peer0
	s.Target, s.Scenario, s.Command, s.DurationS = t.Name, "clients", t.Case, b.Duration.Seconds()
	r := ClientsRun{Case: t.Case, Target: t.Name, Request: t.Request, Clients: b.Clients, Round: round, Summary: s,
		SettledS: settled.Seconds(), Unquiet: !quiet}
	if s.OK > 0 {
		r.CPUMs = 1000 * cpu / float64(s.OK)
		r.SSHDCPUMs = 1000 * sshd / float64(s.OK)
		r.PeerCPUMs = 1000 * peer / float64(s.OK)
	}
	if b.Progress != nil {
		fmt.Fprintf(b.Progress, "clients %s %s ×%d round %d: %d ok %d failed, %.1f req/s, p50 %.1f ms, p99 %.1f ms, cpu %.2f ms, sshd cpu %.2f ms per request %s\n",
			t.Case, t.Name, b.Clients, round, s.OK, s.Failed, s.AchievedRate, s.Latency.P50, s.Latency.P99, r.CPUMs, r.SSHDCPUMs, errorList(s))
	}
	b.Report.Runs = append(b.Report.Runs, r)
}

// ClosedLoop runs op with clients goroutines, each sending its next request when its last one
// is answered: n requests in all when n > 0, otherwise as many as start within d. It returns the
// summary of what it saw; latency counts from each request's send (there is no schedule to be
// late against), and Scheduled is the number of requests sent.
func ClosedLoop(ctx context.Context, op Op, clients, n int, d, timeout time.Duration) Summary {
	start := time.Now()
	rec := openloop.NewRecorder(start)
	deadline := start.Add(d)
	var mu sync.Mutex
	sent := 0
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil || (n > 0 && sent >= n) || (n <= 0 && !time.Now().Before(deadline)) {
			return false
		}
		sent++
		return true
	}
	var wg sync.WaitGroup
	for range max(clients, 1) {
		wg.Go(func() {
			for take() {
				octx, cancel := context.WithTimeout(ctx, timeout)
				t0 := time.Now()
				err := op(octx)
				rec.Record(t0, t0, time.Now(), err)
				cancel()
			}
		})
	}
	wg.Wait()
	s := rec.Summary()
	s.Scheduled = sent
	return s
}

// ChecksumOp returns an Op that asks sshapi for the checksum of path on system with algorithm
// (GET /v1/systems/{id}/checksum/{path}?algorithm=…) and fails unless the answer is want (hex).
func (a *API) ChecksumOp(system, path, algorithm, want string) Op {
	p := "/v1/systems/" + url.PathEscape(system) + "/checksum" + escapePath(path) + "?algorithm=" + url.QueryEscape(algorithm)
	return func(ctx context.Context) error {
		var res struct {
			Checksum string `json:"checksum"`
		}
		if err := a.Call(ctx, http.MethodGet, p, nil, http.StatusOK, &res); err != nil {
			return err
		}
		if !strings.EqualFold(res.Checksum, want) {
			return &KindError{K: "wrong checksum", Msg: fmt.Sprintf("got %q, want %q", res.Checksum, want)}
		}
		return nil
	}
}

// SHA256Hex is the hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// RunCommandOp returns an Op that runs command on system through POST
// /v1/systems/{id}/commands. A non-zero exit is an *ExitError.
func (a *API) RunCommandOp(system, command string) Op {
	return a.commandOp("/v1/systems/"+url.PathEscape(system)+"/commands", command)
}

// PIDs are the processes of a started Python peer target (none for the others).
func (t *Targets) PIDs(target string) []int {
	if p := t.py[target]; p != nil && p.cmd != nil && p.cmd.Process != nil {
		return []int{p.cmd.Process.Pid}
	}
	return nil
}

// WriteMarkdown writes one table per case: every target with its rate, latency and CPU per
// request, and sshapi's rate and p99 divided by each peer's.
func (r *ClientsReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	var cases []string
	for _, s := range r.Runs {
		if !slices.Contains(cases, s.Case) {
			cases = append(cases, s.Case)
		}
	}
	rounds := 1
	for _, s := range r.Runs {
		rounds = max(rounds, s.Round)
	}
	for _, c := range cases {
		var runs []ClientsRun
		base := map[int]*ClientsRun{} // sshapi's run of each round
		for i, s := range r.Runs {
			if s.Case == c {
				runs = append(runs, s)
				if s.Target == BaselineTarget {
					base[s.Round] = &r.Runs[i]
				}
			}
		}
		fmt.Fprintf(&b, "#### %s, %d clients\n\n", caseTitle(c), runs[0].Clients)
		roundCol, roundSep := "", ""
		if rounds > 1 {
			roundCol, roundSep = " round |", "---:|"
		}
		b.WriteString("| target |" + roundCol + " request | requests | failed | req/s | p50 ms | p99 ms | max ms | CPU ms per request (bench process) | sshd CPU ms per request | peer process CPU ms per request | sshapi ÷ target: req/s | sshapi ÷ target: p99 |\n")
		b.WriteString("|---|" + roundSep + "---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range runs {
			base := base[s.Round]
			m := s.Summary
			failed := fmt.Sprint(m.Failed)
			if m.Failed > 0 {
				failed += ": " + strings.ReplaceAll(errorList(m), "|", "/")
			}
			rate, p99 := "–", "–"
			if base != nil && s.Target != BaselineTarget && base.Summary.OK > 0 && m.OK > 0 {
				rate = fmt.Sprintf("%.2f×", base.Summary.AchievedRate/m.AchievedRate)
				p99 = fmt.Sprintf("%.2f×", base.Summary.Latency.P99/m.Latency.P99)
			}
			sshd, peer := "–", "–"
			if s.SSHDCPUMs > 0 {
				sshd = fmt.Sprintf("%.2f", s.SSHDCPUMs)
			}
			if s.PeerCPUMs > 0 {
				peer = fmt.Sprintf("%.2f", s.PeerCPUMs)
			}
			round := ""
			if rounds > 1 {
				round = fmt.Sprintf(" %d |", s.Round)
			}
			fmt.Fprintf(&b, "| %s |%s %s | %d | %s | %.1f | %s | %s | %s | %.2f | %s | %s | %s | %s |\n", s.Target, round, s.Request, m.Scheduled, failed,
				m.AchievedRate, ms(m.Latency.P50, m.OK), ms(m.Latency.P99, m.OK), ms(m.Latency.Max, m.OK), s.CPUMs, sshd, peer, rate, p99)
		}
		b.WriteString("\n")
		if rounds > 1 {
			b.WriteString(roundsLine(runs, rounds))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ClientsTotal is one target's runs of a case over every round: its successful requests, the
// seconds of wall time they took, and its worst p99 and mean CPU per request.
type ClientsTotal struct {
	OK       int
	Seconds  float64
	WorstP99 float64
	CPUMs    float64
	SSHDMs   float64
}

// Rate is the successful requests per second over every round (0 without any).
func (t ClientsTotal) Rate() float64 {
	if t.Seconds <= 0 {
		return 0
	}
	return float64(t.OK) / t.Seconds
}

// ClientsTotals adds up each target's runs of one case (runs of other cases are ignored),
// targets in the order they first ran.
func ClientsTotals(runs []ClientsRun, c string) ([]string, map[string]ClientsTotal) {
	var order []string
	tot := map[string]ClientsTotal{}
	for _, s := range runs {
		m := s.Summary
		if s.Case != c || m.OK == 0 || m.AchievedRate <= 0 {
			continue
		}
		t, seen := tot[s.Target]
		if !seen {
			order = append(order, s.Target)
		}
		n := float64(t.OK)
		k := float64(m.OK)
		t.CPUMs = (t.CPUMs*n + s.CPUMs*k) / (n + k)
		t.SSHDMs = (t.SSHDMs*n + s.SSHDCPUMs*k) / (n + k)
		t.OK += m.OK
		t.Seconds += float64(m.OK) / m.AchievedRate
		t.WorstP99 = max(t.WorstP99, m.Latency.P99)
		tot[s.Target] = t
	}
	return order, tot
}

// roundsLine sums a case's runs over its rounds: each target's requests per second over all of
// them and its worst p99, and sshapi's divided by each peer's.
func roundsLine(runs []ClientsRun, rounds int) string {
	order, tot := ClientsTotals(runs, runs[0].Case)
	base, ok := tot[BaselineTarget]
	if !ok {
		return ""
	}
	var parts []string
	for _, t := range order {
		v := tot[t]
		part := fmt.Sprintf("%s %.1f req/s (worst p99 %.1f ms; CPU %.2f ms + sshd %.2f ms per request)", t, v.Rate(), v.WorstP99, v.CPUMs, v.SSHDMs)
		if t != BaselineTarget && v.Rate() > 0 && v.WorstP99 > 0 {
			part += fmt.Sprintf(": sshapi ÷ %s **%.2f×** req/s, %.2f× worst p99", t, base.Rate()/v.Rate(), base.WorstP99/v.WorstP99)
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("Over %d rounds each: %s.\n\n", rounds, strings.Join(parts, "; "))
}

func caseTitle(c string) string {
	switch c {
	case CaseChecksum:
		return "SHA-256 of an 8-byte file"
	case CaseUptime:
		return "`uptime`"
	case CaseLs:
		return fmt.Sprintf("Listing of a directory of %d entries", LsEntries)
	}
	return c
}

// WriteJSON writes the report to path.
func (r *ClientsReport) WriteJSON(path string) error {
	return writeJSON(path, r)
}

// ListOp returns an Op that lists dir on system through GET /v1/systems/{id}/ls/{path} (full
// metadata JSON, one page) and fails unless the answer is valid JSON that names every one of
// names. Its entries are looked for in the body as `"name":"<name>"` rather than decoded, so
// that the load generator, which shares the bench process with a self-hosted sshapi, spends
// little CPU on it: json.Valid scans the body once (decoding it into a json.RawMessage scanned
// it twice and copied it), and one more pass finds every name (listedNames; a bytes.Contains
// per name scanned it once per name).
func (a *API) ListOp(system, dir string, names []string) Op {
	p := listPath(system, dir, max(len(names), 1))
	want := make(map[string]int, len(names))
	for i, n := range names {
		q, _ := json.Marshal(n)
		want[string(q)] = i
	}
	return func(ctx context.Context) error {
		body, err := a.send(ctx, http.MethodGet, p, nil, http.StatusOK)
		if err != nil {
			return err
		}
		if !json.Valid(body) {
			return &KindError{K: "wrong listing", Msg: "the answer is not valid JSON"}
		}
		if i := listedNames(body, want); i >= 0 {
			return &KindError{K: "wrong listing", Msg: fmt.Sprintf("no entry %q", names[i])}
		}
		return nil
	}
}

// listedNames looks, in one pass over body (valid JSON), for every `"name":` member whose value
// is one of want's keys (JSON strings as encoding/json writes them, quotes included) and returns
// the smallest index of those not there, or -1 when every one is.
func listedNames(body []byte, want map[string]int) int {
	found := make([]bool, len(want))
	n := 0
	key := []byte(`"name":`)
	for rest := body; ; {
		i := bytes.Index(rest, key)
		if i < 0 {
			break
		}
		rest = rest[i+len(key):]
		end := jsonStringLen(rest)
		if j, ok := want[string(rest[:end])]; ok && !found[j] {
			found[j] = true
			n++
		}
		rest = rest[end:]
	}
	if n == len(want) {
		return -1
	}
	for j, ok := range found {
		if !ok {
			return j
		}
	}
	return -1
}

// jsonStringLen is the length of the JSON string that b starts with, quotes included, or 0
// when b does not start with one.
func jsonStringLen(b []byte) int {
	if len(b) == 0 || b[0] != '"' {
		return 0
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return 0
}
