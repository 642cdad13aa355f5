package study

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/service"
)

// ClientsOptions configure the small-requests bench: a fixed number of clients asking, one
// request each at a time, for the SHA-256 of an 8-byte file, for `uptime` and for the listing of
// a directory of bench.LsEntries files, through sshapi and through pooled peers on the same sshd.
// Zero values take the defaults noted.
type ClientsOptions struct {
	// Clients at once (default 50); Duration of each run (default 10s); Rounds of every run
	// (default 1; see bench.ClientsBench.Rounds).
	Clients  int
	Duration time.Duration
	Rounds   int
	// Cases to run (default CaseChecksum, CaseUptime and CaseLs).
	Cases []string
	// Peers beside sshapi (default asyncssh); Python and PeersDir run the Python peers.
	Peers            []string
	Python, PeersDir string
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Profiles, when set, is a directory that receives a CPU profile of each sshapi run.
	Profiles string
}

// PaperClientsRounds is how many rounds `bench paper` runs the small-requests cell: two, in
// ABBA order, so that sshapi is not always the one measured first.
const PaperClientsRounds = 2

// smallContent is the 8-byte file whose checksum the clients bench asks for (the file of
// BenchmarkChecksumSmall50 and TestChecksumProcesses).
var smallContent = []byte("8 bytes\n")

// FireCRESTChecksumRate is what FireCREST's checksum of a small file was reported to reach with
// 50 clients (requests/s, low and high): published and measured elsewhere, never here.
var FireCRESTChecksumRate = [2]float64{105, 133}

// FireCRESTLsRate is what FireCREST's listing of a small directory was reported to reach with 50
// clients (requests/s): published and measured elsewhere, never here.
const FireCRESTLsRate = 107.0

// RunClients starts a throwaway stock sshd and an in-process sshapi, writes an 8-byte file and a
// directory of bench.LsEntries empty files in the remote user's home and measures each case with o.Clients clients through sshapi and the peers.
func RunClients(ctx context.Context, o ClientsOptions) (*bench.ClientsReport, error) {
	if o.Clients <= 0 {
		o.Clients = 50
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if len(o.Cases) == 0 {
		o.Cases = []string{bench.CaseChecksum, bench.CaseUptime, bench.CaseLs}
	}
	if o.Peers == nil {
		o.Peers = []string{bench.PeerAsyncSSH}
	}
	if o.Python == "" {
		o.Python = "bench/.venv/bin/python"
	}
	if o.PeersDir == "" {
		o.PeersDir = "bench/peers"
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
	api, stop, err := l.system(ctx, "data", base)
	if err != nil {
		return nil, err
	}
	defer stop()
	dir, err := l.userDir("bench-small")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "small")
	if err := os.WriteFile(file, smallContent, 0o644); err != nil {
		return nil, fmt.Errorf("small file: %w", err)
	}
	if err := l.chown(file); err != nil {
		return nil, err
	}
	lsDir := filepath.Join(dir, "ls")
	if err := os.Mkdir(lsDir, 0o755); err != nil {
		return nil, fmt.Errorf("ls dir: %w", err)
	}
	var lsNames []string
	for i := range bench.LsEntries {
		lsNames = append(lsNames, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(filepath.Join(lsDir, lsNames[i]), nil, 0o644); err != nil {
			return nil, fmt.Errorf("ls dir: %w", err)
		}
	}
	ep, err := l.sshEndpoint("ssh", l.srv.Host, l.srv.Port)
	if err != nil {
		return nil, err
	}
	peers := &bench.Targets{Endpoint: ep, Peers: o.Peers, Python: o.Python, PeersDir: o.PeersDir}
	if err := peers.Start(ctx); err != nil {
		return nil, err
	}
	defer peers.Stop()

	want := bench.SHA256Hex(smallContent)
	sumCmd := "sha256sum " + filepath.Base(dir) + "/small"
	var targets []bench.ClientsTarget
	for _, c := range o.Cases {
		var sshapiReq, peerCmd string
		var op bench.Op
		switch c {
		case bench.CaseChecksum:
			sshapiReq, peerCmd = "`GET …/checksum/{path}?algorithm=sha256`", sumCmd
			op = api.ChecksumOp(benchSystem, file, "sha256", want)
		case bench.CaseUptime:
			sshapiReq, peerCmd = "`POST /v1/systems/{id}/commands` `uptime`", "uptime"
			op = api.RunCommandOp(benchSystem, "uptime")
		case bench.CaseLs:
			sshapiReq, peerCmd = "`GET …/ls/{path}`", "ls -la "+filepath.Base(dir)+"/ls"
			op = api.ListOp(benchSystem, lsDir, lsNames)
		default:
			return nil, fmt.Errorf("clients bench: unknown case %q (want %s, %s or %s)", c, bench.CaseChecksum, bench.CaseUptime, bench.CaseLs)
		}
		if err := op(ctx); err != nil {
			return nil, fmt.Errorf("sshapi %s: %w", c, err)
		}
		targets = append(targets, bench.ClientsTarget{Case: c, Name: bench.BaselineTarget, Request: sshapiReq, Op: op})
		for _, p := range o.Peers {
			pop, err := peers.CommandOp(p, peerCmd)
			if err != nil {
				return nil, err
			}
			targets = append(targets, bench.ClientsTarget{Case: c, Name: p, Request: "`" + peerCmd + "`", Op: pop, PIDs: peers.PIDs(p)})
		}
	}

	rep := &bench.ClientsReport{Meta: Machine(ctx)}
	rep.Meta.Started, rep.Meta.Runs = time.Now(), max(1, o.Rounds)
	rep.Meta.SSHD = "OpenSSH sshd on 127.0.0.1, stock configuration (MaxSessions 10)"
	rep.Meta.Versions = peers.Versions()
	rep.Meta.Versions["sshapi"] = map[string]string{"sshapi": service.Version}
	cb := &bench.ClientsBench{Targets: targets, Clients: o.Clients, Duration: o.Duration, Rounds: o.Rounds, SSHDPIDs: l.sshdPIDs(), Progress: o.Progress, Report: rep, Profiles: o.Profiles,
		Settle: func(ctx context.Context) (time.Duration, bool) {
			q := waitQuiet(ctx, settleRunMax)
			return q.waited, q.quiet || q.unread
		}}
	err = cb.Run(ctx)
	rep.Meta.Notes = ClientsNotes(o.Clients, o.Duration, o.Peers)
	if o.Rounds > 1 {
		rep.Meta.Notes = append(rep.Meta.Notes, fmt.Sprintf("every target ran %d times, in ABBA order per case (sshapi first in odd rounds, the peers first in even ones): a single run on this shared machine varies by 7-10%% in sshd's CPU per command, and the one measured first met a different machine state; the line under each table adds up the rounds", o.Rounds))
	}
	if v := peers.Versions(); len(v) > 0 {
		rep.Meta.Notes = append(rep.Meta.Notes, "peer versions: "+versions(v))
	}
	rep.Meta.Notes = append(rep.Meta.Notes, settledRuns(rep.Runs))
	rep.Meta.Notes = append(rep.Meta.Notes, fmt.Sprintf("1-minute load average when the runs started: %s; when they ended: %s", loadStart, loadAverage()), settled)
	return rep, err
}

// settleRunMax bounds the wait for a quiet machine before each clients run (the section as a
// whole waits up to settleMax first).
const settleRunMax = 20 * time.Second

// settledRuns says how long the runs waited for a quiet machine before each warm-up, and which
// started on a busy one.
func settledRuns(runs []bench.ClientsRun) string {
	var lo, hi float64
	var busy []string
	for i, r := range runs {
		if i == 0 || r.SettledS < lo {
			lo = r.SettledS
		}
		hi = max(hi, r.SettledS)
		if r.Unquiet {
			busy = append(busy, fmt.Sprintf("%s %s round %d", r.Case, r.Target, max(1, r.Round)))
		}
	}
	note := fmt.Sprintf("before each run's warm-up the bench waited for the machine to be quiet again (at most %d runnable tasks for %s, %s at most), so that no run starts while the one before it is still winding down: waits of %.1f–%.1f s", runtime.NumCPU(), settleQuiet, settleRunMax, lo, hi)
	if len(busy) > 0 {
		note += "; still busy when the wait gave up: " + strings.Join(busy, ", ")
	}
	return note
}

// ClientsNotes say how the clients bench measured.
func ClientsNotes(clients int, d time.Duration, peers []string) []string {
	return []string{
		fmt.Sprintf("closed loop: %d clients, each sending its next request as soon as its last one is answered, for %s per target after %d unmeasured requests; req/s is successful requests per second of wall time; latency runs from a request's send to its answer (HDR histogram, 3 significant digits)", clients, d, 2*clients),
		fmt.Sprintf("**sshapi** (in the bench process, its defaults: up to 6 connections × 8 channels per credential) answers `GET /v1/systems/{id}/checksum/{path}?algorithm=sha256` of an 8-byte file (one `sha256sum` process on the server per request, forked by the connection's shared shell (`pool.shell_depth`) rather than started in a session of its own; the answer is checked against the file's SHA-256), `POST /v1/systems/{id}/commands` with `uptime`, and `GET /v1/systems/{id}/ls/{path}` of a directory of %d empty files (full metadata JSON, checked to name them all), over HTTP keep-alive", bench.LsEntries),
		"the peers (" + strings.Join(peers, ", ") + ") run the same work as a command on a pool of their own on the same sshd: `sha256sum <file>` (its exit status checked, its output not), `uptime` and `ls -la <dir>`; asyncssh is a pool of 6 connections × 8 channels, like sshapi's, driven over a pipe by the same Go engine; this is the baseline the issue asks for (`ssh host sha256sum file` over a pooled connection)",
		fmt.Sprintf("FireCREST could not run here: its %g–%g checksums/s and %g listings/s at 50 clients were published and measured elsewhere, on other hardware, and are not compared with this run", FireCRESTChecksumRate[0], FireCRESTChecksumRate[1], FireCRESTLsRate),
		"CPU per request: user+system of the bench process (which hosts sshapi and the load generator; less the thread that samples sshd, whose own CPU is measured and taken off), of the Python peer's process, and of the sshd process tree (sampled from /proc every 100 ms, with the children each process waited for), divided by the successful requests",
	}
}

// ClientsSection writes the clients report into a Markdown document.
func ClientsSection(w io.Writer, r *bench.ClientsReport) error {
	if r == nil || len(r.Runs) == 0 {
		return nil
	}
	tables := func(w io.Writer) error {
		if err := r.WriteMarkdown(w); err != nil {
			return err
		}
		return firecrestLine(w, r)
	}
	return writeSection(w, "Small requests from many clients at once", "Many clients asking for little work at once: the SHA-256 of an 8-byte file, `uptime` and the listing of a small directory, through sshapi's API and through a pooled SSH peer on the same sshd. \"sshapi ÷ target: req/s\" above 1 means sshapi answered more requests per second; \"sshapi ÷ target: p99\" below 1 means sshapi's 99th percentile was shorter.",
		r.Meta.Notes, tables, "")
}

// firecrestLine sets sshapi's checksum and listing rates beside FireCREST's published ones,
// labelled as not measured here (nothing for a case whose sshapi run is missing or failed
// entirely).
func firecrestLine(w io.Writer, r *bench.ClientsReport) error {
	for _, c := range []string{bench.CaseChecksum, bench.CaseLs} {
		_, tot := bench.ClientsTotals(r.Runs, c)
		s, ok := tot[bench.BaselineTarget]
		if !ok {
			continue
		}
		clients := 0
		for _, run := range r.Runs {
			if run.Case == c {
				clients = run.Clients
			}
		}
		var err error
		switch c {
		case bench.CaseChecksum:
			lo, hi := FireCRESTChecksumRate[0], FireCRESTChecksumRate[1]
			_, err = fmt.Fprintf(w, "Against FireCREST (**not measured here**: its %g–%g checksums/s at 50 clients were published and measured elsewhere, on other hardware, so this is no same-run ratio): sshapi's %.1f checksums/s with %d clients in this run are %.2f–%.2f× those figures.\n\n",
				lo, hi, s.Rate(), clients, s.Rate()/hi, s.Rate()/lo)
		case bench.CaseLs:
			_, err = fmt.Fprintf(w, "Against FireCREST (**not measured here**: its %g listings/s of a small directory at 50 clients were published and measured elsewhere, on other hardware, so this is no same-run ratio): sshapi's %.1f listings/s with %d clients in this run, p99 %.1f ms (the worst of its runs), are %.1f× that figure.\n\n",
				FireCRESTLsRate, s.Rate(), clients, s.WorstP99, s.Rate()/FireCRESTLsRate)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
