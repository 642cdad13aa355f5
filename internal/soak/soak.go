// Package soak runs sshapi under realistic mixed load while faults are injected, and checks
// afterwards that nothing acknowledged was lost: `sshapi bench soak` and TestSoakShort.
//
// The setting, all on loopback: a throwaway stock OpenSSH sshd (internal/sshtest) registered as
// two systems (b through a wanem proxy when a network fault is scheduled), a throwaway
// PostgreSQL cluster (internal/pgtest; with a streaming replica when the failover is scheduled),
// N `sshapi serve` subprocesses of one binary sharing it, and HAProxy in front of them
// health-checking /readyz. The load (open loop at a fixed rate) mixes commands, stats, listings,
// verified uploads, downloads of acknowledged uploads and system-to-system transfers. Faults run
// one at a time in windows whose start and end are recorded: sshd restarted (every session
// process killed), an instance killed with SIGKILL and started again, another stopped with
// SIGTERM and started again, PostgreSQL stopped and started on the same data directory,
// PostgreSQL failed over to its replica, the network to system b black-holed or trickling, and
// a small filesystem on the sshd filled up while uploads and a transfer write into it.
package soak

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/wanem"
)

// Fault names, in the default order.
const (
	FaultSSHD = "sshd-restart"
	FaultKill = "instance-sigkill"
	FaultPG   = "postgres-restart"
	FaultTerm = "instance-sigterm"
	// FaultStall black-holes the network between the instances and system b's sshd for
	// Options.StallFor (the wanem proxy in front of it holds every byte and new connection), then
	// lets it flow again.
	FaultStall = "sshd-blackhole"
	// FaultTrickle slows the network to system b's sshd to Options.TrickleRate for
	// Options.StallFor, then restores it.
	FaultTrickle = "sshd-trickle"
	// FaultFailover stops the PostgreSQL primary (fast shutdown), promotes its streaming replica
	// (pg_ctl promote) and rejoins the old primary as the new one's replica (a fresh base backup).
	// The instances have both in a multi-host URL with target_session_attrs=read-write.
	FaultFailover = "postgres-failover"
	// FaultDiskFull fills a small filesystem mounted on the sshd's side (a tmpfs) and, while it
	// is full, uploads into it and starts a transfer into it; then frees it again.
	FaultDiskFull = "disk-full"
	baselinePhase = "baseline"
)

// DefaultFaults is every fault, in the order they are injected, cycling when the run is long
// enough: the database and the instances alternate with the sshd, its network and its disk.
var DefaultFaults = []string{FaultSSHD, FaultKill, FaultFailover, FaultStall, FaultTerm, FaultDiskFull, FaultPG, FaultTrickle}

// Options sets up a soak run.
type Options struct {
	// Binary is the sshapi executable run as the instances (`sshapi serve`).
	Binary string `json:"-"`
	// Duration is how long load is sent; Rate is requests per second (open loop).
	Duration time.Duration
	Rate     float64
	// Instances is how many sshapi processes share the database (at least 2 for the instance faults).
	Instances int
	// FaultEvery is the quiet time before each fault window (and after the last one).
	FaultEvery time.Duration
	// Faults is the order of faults; DefaultFaults when nil. An empty non-nil slice injects none.
	Faults []string
	// Cycles, when positive, stops the faults after that many passes over Faults; otherwise
	// they cycle while the load lasts.
	Cycles int
	// DrainFor is how long the acknowledged transfers may take to finish after the load
	// (default 3 minutes); one that has not is reported as not finished.
	DrainFor time.Duration
	// StallFor is how long FaultStall black-holes, and FaultTrickle slows, the path to system b
	// (default 15 s).
	StallFor time.Duration
	// TrickleRate is the path's rate in bytes per second, each way, during FaultTrickle (default
	// 64 KiB/s).
	TrickleRate int64
	// BigFile is the size of the large transfer source (default 3 MiB).
	BigFile int64
	// LogDir, when set, receives the instances', HAProxy's and sshd's logs at the end.
	LogDir string `json:"-"`
	// Progress receives a line per event (nil: none).
	Progress io.Writer `json:"-"`
}

// Window is one fault: what, when it started, and when the system was ready again (every
// instance's /readyz 200 and the balancer's) plus a settle time.
type Window struct {
	Fault string    `json:"fault"`
	Name  string    `json:"name"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Error string    `json:"error,omitempty"`
	// Note says what the fault did where that is not obvious (which server became the primary).
	Note string `json:"note,omitempty"`
}

// result is one request of the load.
type result struct {
	op      string
	start   time.Time
	latency time.Duration
	status  int    // 0: no HTTP answer
	kind    string // "ok", "http 503", "transport", "check: ..."
	retryAf bool   // a Retry-After header came with it
	detail  string // a 5xx answer's body, shortened
}

type upload struct {
	Path, SHA256, RequestID string
}

type transferRec struct {
	ID, Src, Dst, RequestID string
}

// run is the state of one soak.
type run struct {
	o        Options
	srv      *sshtest.Server
	pg       *pgtest.Cluster // the primary
	standby  *pgtest.Cluster // its streaming replica, when FaultFailover is scheduled
	lb       *haproxy
	wan      *wanem.Proxy // in front of system b's sshd, when a network fault is scheduled
	small    *smallFS     // the filesystem FaultDiskFull fills
	full     []fullAttempt
	ins      []*instance
	scratch  string
	dir      string // the run's directory in the remote user's home
	token    string
	client   *http.Client
	base     string
	seq      int64
	progress io.Writer

	mu        sync.Mutex
	results   []result
	uploads   []upload
	transfers []transferRec
	windows   []Window
	samples   []Sample
	dbSamples []DBSample
	corruptDL []string
	linkAudit []string // request ids of acknowledged link creations and link downloads
	smallSrcs []string
	bigSrc    string
	uid, gid  int
	loadStart time.Time
	note      string // the current fault's Window.Note
}

func (r *run) logf(format string, a ...any) {
	if r.progress != nil {
		fmt.Fprintf(r.progress, "%s soak: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
}

// Run sets everything up, sends the load, injects the faults, verifies and returns the report.
// The report is returned even when err is not nil where the run got far enough.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Instances < 1 {
		o.Instances = 2
	}
	if o.Rate <= 0 {
		o.Rate = 10
	}
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.FaultEvery <= 0 {
		o.FaultEvery = 15 * time.Second
	}
	if o.Faults == nil {
		o.Faults = DefaultFaults
	}
	if o.StallFor <= 0 {
		o.StallFor = 15 * time.Second
	}
	if o.DrainFor <= 0 {
		o.DrainFor = 3 * time.Minute
	}
	if o.TrickleRate <= 0 {
		o.TrickleRate = 64 << 10
	}
	if o.BigFile <= 0 {
		o.BigFile = 3 << 20
	}
	for _, f := range o.Faults {
		switch f {
		case FaultSSHD, FaultPG, FaultStall, FaultTrickle, FaultFailover, FaultDiskFull:
		case FaultKill, FaultTerm:
			if o.Instances < 2 {
				return nil, fmt.Errorf("fault %s needs at least 2 instances", f)
			}
		default:
			return nil, fmt.Errorf("unknown fault %q (want some of %s)", f, strings.Join(DefaultFaults, ", "))
		}
	}
	if o.Binary == "" {
		return nil, errors.New("no sshapi binary")
	}
	r := &run{o: o, progress: o.Progress, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}}}
	defer r.close()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	began := time.Now()
	r.drive(ctx)
	r.logf("load done (%d requests); draining transfers", len(r.results))
	rep := r.verify(ctx)
	rep.Options = o
	rep.Started, rep.Elapsed = began, time.Since(began).Round(time.Millisecond).String()
	if bad := rep.Failures(); len(bad) > 0 {
		return rep, fmt.Errorf("soak found problems: %s", strings.Join(bad, "; "))
	}
	return rep, nil
}

func (r *run) close() {
	if r.lb != nil {
		r.lb.Close()
	}
	if r.wan != nil {
		r.wan.Restore()
	}
	for _, in := range r.ins {
		in.signal(syscall.SIGTERM, 20*time.Second)
	}
	if r.scratch != "" && r.o.LogDir != "" {
		r.keepLogs()
	}
	if r.pg != nil {
		r.pg.Stop()
	}
	if r.standby != nil {
		r.standby.Stop()
	}
	if r.wan != nil {
		_ = r.wan.Stop()
	}
	if r.small != nil {
		r.small.unmount()
	}
	if r.srv != nil {
		_ = r.srv.Close()
	}
	if r.dir != "" && filepath.Dir(r.dir) == filepath.Clean(r.srv.Home) {
		_ = os.RemoveAll(r.dir)
	}
	if r.scratch != "" {
		_ = os.RemoveAll(r.scratch)
	}
}

// keepLogs copies the logs into LogDir.
func (r *run) keepLogs() {
	if err := os.MkdirAll(r.o.LogDir, 0o755); err != nil {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(r.scratch, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(r.o.LogDir, "soak-"+filepath.Base(l)), b, 0o644)
		}
	}
	if r.srv != nil {
		_ = os.WriteFile(filepath.Join(r.o.LogDir, "soak-sshd.log"), []byte(r.srv.Log()), 0o644)
	}
	for _, c := range []*pgtest.Cluster{r.pg, r.standby} {
		if c == nil {
			continue
		}
		if b, err := os.ReadFile(c.LogPath()); err == nil {
			_ = os.WriteFile(filepath.Join(r.o.LogDir, fmt.Sprintf("soak-postgres-%d.log", c.Port)), b, 0o644)
		}
	}
}

func (r *run) setup(ctx context.Context) error {
	var err error
	if r.scratch, err = os.MkdirTemp("", "sshapi-soak-"); err != nil {
		return err
	}
	if r.srv, err = sshtest.Start(ctx, sshtest.Options{}); err != nil {
		return fmt.Errorf("sshd: %w", err)
	}
	u, err := user.Lookup(r.srv.User)
	if err != nil {
		return err
	}
	r.uid, _ = strconv.Atoi(u.Uid)
	r.gid, _ = strconv.Atoi(u.Gid)
	if r.dir, err = os.MkdirTemp(r.srv.Home, fmt.Sprintf("soak-%d-*", os.Getpid())); err != nil {
		return err
	}
	for _, d := range []string{r.dir, filepath.Join(r.dir, "src"), filepath.Join(r.dir, "up"), filepath.Join(r.dir, "dst")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.Chown(d, r.uid, r.gid); err != nil {
			return err
		}
	}
	for i := 0; i < 8; i++ {
		p := filepath.Join(r.dir, "src", fmt.Sprintf("small-%d", i))
		if err := r.writeRandom(p, 64<<10); err != nil {
			return err
		}
		r.smallSrcs = append(r.smallSrcs, p)
	}
	r.bigSrc = filepath.Join(r.dir, "src", "big")
	if err := r.writeRandom(r.bigSrc, r.o.BigFile); err != nil {
		return err
	}
	r.logf("sshd on %s, run dir %s", r.srv.Addr, r.dir)
	dsn, err := r.startDatabase(ctx)
	if err != nil {
		return err
	}
	line, err := secret.NewKeyLine()
	if err != nil {
		return err
	}
	tokenSecret := make([]byte, 32)
	_, _ = rand.Read(tokenSecret)
	keyFile, secretFile := filepath.Join(r.scratch, "master.keys"), filepath.Join(r.scratch, "token.secret")
	if err := os.WriteFile(keyFile, []byte(line+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(secretFile, []byte(base64.StdEncoding.EncodeToString(tokenSecret)+"\n"), 0o600); err != nil {
		return err
	}
	if r.token, err = auth.IssueHS256(tokenSecret, "soak", 24*time.Hour, time.Now()); err != nil {
		return err
	}
	env := []string{
		"SSHAPI_DATABASE=" + dsn,
		"SSHAPI_KEYS_MASTER_KEY_FILE=" + keyFile,
		"SSHAPI_KEYS_TOKEN_SECRET_FILE=" + secretFile,
		"SSHAPI_LOG_LEVEL=warn",
		// Short leases and polls so a killed instance's transfers move on within the run.
		"SSHAPI_TRANSFER_LEASE_TTL=5s",
		"SSHAPI_TRANSFER_REAP_INTERVAL=1s",
		"SSHAPI_TRANSFER_POLL_INTERVAL=200ms",
		"SSHAPI_TRANSFER_RETRY_BASE=500ms",
		// A temporary file a failed request could not remove is swept within seconds.
		"SSHAPI_HTTP_TEMP_LEASE=" + tempLease.String(),
	}
	for i := 0; i < r.o.Instances; i++ {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		name := fmt.Sprintf("i%d", i)
		in := &instance{name: name, addr: addr, bin: r.o.Binary, env: env,
			dataDir: filepath.Join(r.scratch, name), logPath: filepath.Join(r.scratch, name+".log")}
		if err := in.start(ctx); err != nil {
			return err
		}
		r.ins = append(r.ins, in)
		r.logf("instance %s on %s (pid %d)", name, addr, in.pid())
	}
	if r.lb, err = startHAProxy(ctx, r.scratch, r.ins, true); err != nil {
		return err
	}
	r.base = "http://" + r.lb.addr
	r.logf("haproxy on %s", r.lb.addr)
	hostKey := r.srv.AuthorizedHostKey()
	hosts := map[string]string{"a": r.srv.Host, "b": r.srv.Host}
	ports := map[string]int{"a": r.srv.Port, "b": r.srv.Port}
	if r.scheduled(FaultStall, FaultTrickle) {
		if r.wan, err = startWAN(ctx, r.srv.Addr); err != nil {
			return err
		}
		addr := r.wan.Addr().(*net.TCPAddr)
		hosts["b"], ports["b"] = addr.IP.String(), addr.Port
		r.logf("system b reaches the sshd through a wanem proxy on %s (for the network faults)", addr)
	}
	if r.scheduled(FaultDiskFull) {
		if r.small, err = mountSmallFS(filepath.Join(r.dir, "small"), r.uid, r.gid); err != nil {
			return fmt.Errorf("%s: %w", FaultDiskFull, err)
		}
		r.logf("a %d MiB tmpfs on %s (for %s)", smallFSSize>>20, r.small.dir, FaultDiskFull)
	}
	for _, id := range []string{"a", "b"} {
		body := map[string]any{"id": id, "host": hosts[id], "port": ports[id], "host_keys": []string{hostKey}}
		if st, _, err := r.call(ctx, "POST", "/v1/systems", body, nil); err != nil || st != 201 {
			return fmt.Errorf("register system %s: %d %v", id, st, err)
		}
		cred := map[string]any{"username": r.srv.User, "private_key": string(r.srv.PrivateKeyPEM)}
		if st, _, err := r.call(ctx, "PUT", "/v1/systems/"+id+"/credential", cred, nil); err != nil || st != 200 {
			return fmt.Errorf("credential %s: %d %v", id, st, err)
		}
	}
	return nil
}

func (r *run) writeRandom(path string, n int64) error {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	return os.Chown(path, r.uid, r.gid)
}

// call sends a JSON request through the balancer and decodes a JSON answer into out.
func (r *run) call(ctx context.Context, method, path string, body, out any) (int, http.Header, error) {
	st, h, _, err := r.callBody(ctx, method, path, body, out)
	return st, h, err
}

// callBody is call that also returns the answer's body.
func (r *run) callBody(ctx context.Context, method, path string, body, out any) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(mustJSON(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	st, h, b, err := r.send(req)
	if err == nil && out != nil && st < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return st, h, b, fmt.Errorf("decode: %w", err)
		}
	}
	return st, h, b, err
}

// send sends req with the bearer token and reads the whole answer.
func (r *run) send(req *http.Request) (int, http.Header, []byte, error) {
	req.Header.Set("Authorization", "Bearer "+r.token)
	res, err := r.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b, err
}

// remote turns a local path under the remote home into the API's URL form (no leading slash).
func remote(p string) string { return strings.TrimPrefix(p, "/") }

// ops is the load mix: name and weight.
var ops = []struct {
	name   string
	weight int
}{{"command", 20}, {"stat", 15}, {"list", 10}, {"upload", 25}, {"download", 15}, {"transfer-small", 12}, {"transfer-big", 3}, {"link", 5}}

func pickOp() string {
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := mrand.IntN(total)
	for _, o := range ops {
		if n < o.weight {
			return o.name
		}
		n -= o.weight
	}
	return ops[0].name
}

// scheduled reports whether any of faults is in the schedule.
func (r *run) scheduled(faults ...string) bool {
	for _, f := range r.o.Faults {
		for _, g := range faults {
			if f == g {
				return true
			}
		}
	}
	return false
}

// maxInFlight bounds the requests in flight: four seconds of the load, at least 64. A request
// that would exceed it is recorded as not sent (the open loop does not slow down).
func maxInFlight(rate float64) int { return max(64, int(rate*4)) }

// drive sends the load at the rate for the duration while the fault schedule runs.
func (r *run) drive(ctx context.Context) {
	r.loadStart = time.Now()
	lctx, cancel := context.WithTimeout(ctx, r.o.Duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.faults(lctx) }()
	go func() { defer wg.Done(); r.sample(lctx) }()
	interval := time.Duration(float64(time.Second) / r.o.Rate)
	sem := make(chan struct{}, maxInFlight(r.o.Rate))
	var reqs sync.WaitGroup
	next := time.Now()
	for lctx.Err() == nil {
		next = next.Add(interval)
		select {
		case <-lctx.Done():
		case <-time.After(time.Until(next)):
		}
		if lctx.Err() != nil {
			break
		}
		op, sched := pickOp(), next
		select {
		case sem <- struct{}{}:
		default:
			r.record(result{op: op, start: sched, kind: fmt.Sprintf("not sent: %d in flight", cap(sem))})
			continue
		}
		reqs.Add(1)
		go func() {
			defer reqs.Done()
			defer func() { <-sem }()
			rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
			defer rcancel()
			res := r.do(rctx, op)
			res.op, res.start, res.latency = op, sched, time.Since(sched)
			r.record(res)
		}()
	}
	reqs.Wait()
	wg.Wait()
}

func (r *run) record(res result) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
}

// outcome fills status and kind from an HTTP answer.
func outcome(st int, h http.Header, body []byte, err error, want ...int) result {
	res := result{status: st}
	if st >= 500 {
		res.detail = strings.Join(strings.Fields(string(body)), " ")
		if len(res.detail) > 400 {
			res.detail = res.detail[:400] + "…"
		}
	}
	if h != nil {
		res.retryAf = h.Get("Retry-After") != ""
	}
	switch {
	case st == 0 && err != nil:
		res.kind = "transport"
		res.detail = err.Error()
	case containsInt(want, st) && err == nil:
		res.kind = "ok"
	case containsInt(want, st):
		res.kind = "check: " + err.Error()
	default:
		res.kind = "http " + strconv.Itoa(st)
	}
	return res
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func (r *run) nextID(prefix string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return fmt.Sprintf("soak-%s-%d", prefix, r.seq)
}

func (r *run) do(ctx context.Context, op string) result {
	switch op {
	case "command":
		var out struct {
			Stdout     string `json:"stdout"`
			ExitStatus *int   `json:"exit_status"`
		}
		st, h, b, err := r.callBody(ctx, "POST", "/v1/systems/a/commands", map[string]any{"command": "echo soak", "timeout_s": 30}, &out)
		if err == nil && st == 200 && (out.ExitStatus == nil || *out.ExitStatus != 0 || strings.TrimSpace(out.Stdout) != "soak") {
			err = errors.New("exit status not 0 or output not \"soak\"")
		}
		return outcome(st, h, b, err, 200)
	case "stat":
		st, h, b, err := r.callBody(ctx, "GET", "/v1/systems/a/stat/"+remote(r.bigSrc), nil, nil)
		return outcome(st, h, b, err, 200)
	case "list":
		st, h, b, err := r.callBody(ctx, "GET", "/v1/systems/b/ls/"+remote(filepath.Join(r.dir, "src")), nil, nil)
		return outcome(st, h, b, err, 200)
	case "upload":
		return r.upload(ctx)
	case "download":
		return r.download(ctx)
	case "transfer-small", "transfer-big":
		return r.transfer(ctx, op == "transfer-big")
	case "link":
		return r.link(ctx)
	}
	return result{kind: "unknown op"}
}

func (r *run) upload(ctx context.Context) result {
	n := 1<<10 + mrand.IntN(255<<10)
	b := make([]byte, n)
	_, _ = rand.Read(b)
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	id := r.nextID("up")
	p := filepath.Join(r.dir, "up", id)
	req, _ := http.NewRequestWithContext(ctx, "PUT", r.base+"/v1/systems/a/content/"+remote(p), bytes.NewReader(b))
	req.Header.Set("X-Checksum-Sha256", hexSum)
	req.Header.Set("X-Request-Id", id)
	st, h, body, err := r.send(req)
	out := outcome(st, h, body, err, 200, 201)
	if out.kind == "ok" {
		rid := h.Get("X-Request-Id")
		r.mu.Lock()
		r.uploads = append(r.uploads, upload{Path: p, SHA256: hexSum, RequestID: rid})
		r.mu.Unlock()
	}
	return out
}

func (r *run) download(ctx context.Context) result {
	r.mu.Lock()
	if len(r.uploads) == 0 {
		r.mu.Unlock()
		return r.do(ctx, "stat")
	}
	u := r.uploads[mrand.IntN(len(r.uploads))]
	r.mu.Unlock()
	req, _ := http.NewRequestWithContext(ctx, "GET", r.base+"/v1/systems/b/content/"+remote(u.Path), nil)
	st, h, body, err := r.send(req)
	out := outcome(st, h, body, err, 200)
	if sum := sha256.Sum256(body); out.kind == "ok" && hex.EncodeToString(sum[:]) != u.SHA256 {
		out.kind = "check: download differs from the acknowledged upload"
		r.mu.Lock()
		r.corruptDL = append(r.corruptDL, u.Path)
		r.mu.Unlock()
	}
	return out
}

func (r *run) transfer(ctx context.Context, big bool) result {
	src := r.smallSrcs[mrand.IntN(len(r.smallSrcs))]
	if big {
		src = r.bigSrc
	}
	id := r.nextID("tr")
	dst := filepath.Join(r.dir, "dst", id)
	spec := map[string]any{"source": map[string]any{"system": "a", "path": src},
		"destination": map[string]any{"system": "b", "path": dst}, "verify": "sha256", "idempotency_key": id}
	req, _ := http.NewRequestWithContext(ctx, "POST", r.base+"/v1/transfers", bytes.NewReader(mustJSON(spec)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	st, h, body, err := r.send(req)
	var t struct {
		ID string `json:"id"`
	}
	if err == nil && st >= 200 && st < 300 {
		if err = json.Unmarshal(body, &t); err == nil && t.ID == "" {
			err = errors.New("no transfer id in the answer")
		}
	}
	out := outcome(st, h, body, err, 200, 201, 202)
	if out.kind == "ok" {
		r.mu.Lock()
		r.transfers = append(r.transfers, transferRec{ID: t.ID, Src: src, Dst: dst, RequestID: h.Get("X-Request-Id")})
		r.mu.Unlock()
	}
	return out
}

// inflightUpload sends an 8 MiB upload directly to in, slowly (64 KiB every 20 ms), so that a
// fault lands while it is being written. It counts as an acknowledged upload only if answered 201.
func (r *run) inflightUpload(ctx context.Context, in *instance) {
	b := make([]byte, 8<<20)
	_, _ = rand.Read(b)
	sum := sha256.Sum256(b)
	id := r.nextID("inflight")
	p := filepath.Join(r.dir, "up", id)
	pr, pw := io.Pipe()
	go func() {
		for off := 0; off < len(b); off += 64 << 10 {
			if _, err := pw.Write(b[off : off+64<<10]); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = pw.Close()
	}()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "PUT", "http://"+in.addr+"/v1/systems/a/content/"+remote(p), pr)
	req.ContentLength = int64(len(b))
	req.Header.Set("X-Checksum-Sha256", hex.EncodeToString(sum[:]))
	req.Header.Set("X-Request-Id", id)
	st, h, body, err := r.send(req)
	_ = pr.CloseWithError(io.ErrClosedPipe)
	res := outcome(st, h, body, err, 200, 201)
	res.op, res.start, res.latency = "upload-inflight", start, time.Since(start)
	if res.kind == "ok" {
		r.mu.Lock()
		r.uploads = append(r.uploads, upload{Path: p, SHA256: hex.EncodeToString(sum[:]), RequestID: h.Get("X-Request-Id")})
		r.mu.Unlock()
	}
	r.record(res)
	r.logf("in-flight upload to %s during the fault: %s (%s)", in.name, res.kind, res.detail)
}

// link makes a read link to an acknowledged upload, downloads through it without a token,
// comparing the bytes with the upload, and revokes it, as a client that is done with it does
// (links count against the per-system quota, 1000 by default, until they expire).
func (r *run) link(ctx context.Context) result {
	r.mu.Lock()
	if len(r.uploads) == 0 {
		r.mu.Unlock()
		return r.do(ctx, "stat")
	}
	u := r.uploads[mrand.IntN(len(r.uploads))]
	r.mu.Unlock()
	id := r.nextID("link")
	req, _ := http.NewRequestWithContext(ctx, "POST", r.base+"/v1/systems/a/links",
		bytes.NewReader(mustJSON(map[string]any{"path": u.Path, "access": "read", "expires_in_s": 3600, "max_uses": 2})))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	st, h, body, err := r.send(req)
	var l struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	}
	if err == nil && st == 201 {
		if err = json.Unmarshal(body, &l); err == nil && !strings.Contains(l.URL, "/v1/links/") {
			err = fmt.Errorf("link url %q", l.URL)
		}
	}
	if out := outcome(st, h, body, err, 201); out.kind != "ok" {
		return out
	}
	r.mu.Lock()
	r.linkAudit = append(r.linkAudit, h.Get("X-Request-Id"))
	r.mu.Unlock()
	token := l.URL[strings.Index(l.URL, "/v1/links/")+len("/v1/links/"):]
	req, _ = http.NewRequestWithContext(ctx, "GET", r.base+"/v1/links/"+token, nil)
	req.Header.Set("X-Request-Id", id+"-get")
	res, err := r.client.Do(req) // no Authorization: the link is the credential
	if err != nil {
		return outcome(0, nil, nil, err)
	}
	defer res.Body.Close()
	got, rerr := io.ReadAll(res.Body)
	out := outcome(res.StatusCode, res.Header, got, rerr, 200)
	if out.kind != "ok" {
		return out
	}
	r.mu.Lock()
	r.linkAudit = append(r.linkAudit, res.Header.Get("X-Request-Id"))
	if sum := sha256.Sum256(got); hex.EncodeToString(sum[:]) != u.SHA256 {
		out.kind = "check: link download differs from the acknowledged upload"
		r.corruptDL = append(r.corruptDL, "link "+u.Path)
	}
	r.mu.Unlock()
	if out.kind != "ok" {
		return out
	}
	st, h, body, err = r.callBody(ctx, "DELETE", "/v1/systems/a/links/"+l.ID, nil, nil)
	return outcome(st, h, body, err, http.StatusNoContent)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// faults runs the schedule: quiet for FaultEvery, one fault, and again, while the load lasts
// and at least FaultEvery of it remains after the next window's likely end.
func (r *run) faults(ctx context.Context) {
	if len(r.o.Faults) == 0 {
		return
	}
	end, _ := ctx.Deadline()
	count := map[string]int{}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.o.FaultEvery):
		}
		if time.Until(end) < r.o.FaultEvery+10*time.Second || r.o.Cycles > 0 && i >= r.o.Cycles*len(r.o.Faults) {
			return
		}
		f := r.o.Faults[i%len(r.o.Faults)]
		count[f]++
		w := Window{Fault: f, Name: fmt.Sprintf("%s#%d", f, count[f]), Start: time.Now()}
		r.logf("fault %s: start", w.Name)
		if err := r.inject(context.WithoutCancel(ctx), f, i); err != nil {
			w.Error = err.Error()
			r.logf("fault %s: %v", w.Name, err)
		}
		w.Note, r.note = r.note, ""
		r.waitReady(context.WithoutCancel(ctx))
		time.Sleep(2 * time.Second) // pools redial, the balancer's checks pass again
		w.End = time.Now()
		r.logf("fault %s: end after %s", w.Name, w.End.Sub(w.Start).Round(time.Millisecond))
		r.mu.Lock()
		r.windows = append(r.windows, w)
		r.mu.Unlock()
	}
}

func (r *run) inject(ctx context.Context, f string, i int) error {
	switch f {
	case FaultSSHD:
		return r.srv.Restart(ctx) // kills the listener and every per-connection process first
	case FaultKill:
		in := r.ins[0]
		// An upload straight to this instance, still sending when the kill lands: not acknowledged,
		// so it must leave nothing behind (the leftover check covers its temporary file).
		go r.inflightUpload(ctx, in)
		time.Sleep(1500 * time.Millisecond)
		in.signal(syscall.SIGKILL, 10*time.Second)
		time.Sleep(time.Second)
		return in.start(ctx)
	case FaultTerm:
		in := r.ins[len(r.ins)-1]
		in.signal(syscall.SIGTERM, 60*time.Second)
		return in.start(ctx)
	case FaultStall:
		r.wan.Blackhole()
		time.Sleep(r.o.StallFor)
		r.wan.Restore()
		return nil
	case FaultTrickle:
		if err := r.wan.SetRate(r.o.TrickleRate); err != nil {
			return fmt.Errorf("trickle: %w", err)
		}
		time.Sleep(r.o.StallFor)
		return r.wan.SetRate(0)
	case FaultPG:
		r.pg.Halt()
		time.Sleep(time.Second)
		return r.pg.Resume(ctx)
	case FaultFailover:
		return r.failover(ctx)
	case FaultDiskFull:
		return r.diskFull(ctx)
	}
	return fmt.Errorf("unknown fault %s", f)
}

// waitReady waits (up to a minute) until every instance and the balancer answer /readyz 200.
func (r *run) waitReady(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok := ready(r.base + "/readyz")
		for _, in := range r.ins {
			ok = ok && ready("http://"+in.addr+"/readyz")
		}
		if ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tempLease is the instances' http.temp_lease, and cleanupWait how long the check awaits the
// removal of temporary files failed requests left: a lapsed lease, then a sweep (every third of
// a lease), with room for a loaded machine.
const (
	tempLease   = 2 * time.Second
	cleanupWait = 10 * tempLease
)

// leftovers lists the temporary files anywhere in the run directory.
func (r *run) leftovers() []string {
	var out []string
	_ = filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && partName.MatchString(d.Name()) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

var partName = regexp.MustCompile(`^\..*\.sshapi-.*\.part$`)

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verify drains the transfers and checks everything acknowledged.
func (r *run) verify(ctx context.Context) *Report {
	rep := &Report{Windows: r.windows, Samples: r.samples, DBSamples: r.dbSamples, LoadStart: r.loadStart}
	// Transfers: wait until each is terminal (leases of killed instances expire meanwhile).
	deadline := time.Now().Add(r.o.DrainFor)
	status := map[string]string{}
	for _, t := range r.transfers {
		for {
			var out struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			}
			st, _, err := r.call(ctx, "GET", "/v1/transfers/"+t.ID, nil, &out)
			if err == nil && st == 200 && (out.Status == "succeeded" || out.Status == "failed" || out.Status == "canceled") {
				status[t.ID] = out.Status
				if out.Status != "succeeded" {
					rep.TransferProblems = append(rep.TransferProblems, fmt.Sprintf("%s (%s → %s): %s: %s", t.ID, t.Src, t.Dst, out.Status, out.Error))
				}
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				status[t.ID] = "unfinished: " + out.Status
				rep.TransferProblems = append(rep.TransferProblems, fmt.Sprintf("%s (%s → %s): not finished after the drain (%s)", t.ID, t.Src, t.Dst, out.Status))
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	rep.Check.TransfersAcknowledged = len(r.transfers)
	for _, t := range r.transfers {
		if status[t.ID] != "succeeded" {
			continue
		}
		rep.Check.TransfersSucceeded++
		a, errA := fileSHA256(t.Src)
		b, errB := fileSHA256(t.Dst)
		if errA != nil || errB != nil || a != b {
			rep.Check.TransfersMismatched = append(rep.Check.TransfersMismatched, fmt.Sprintf("%s: src %s %v, dst %s %v", t.ID, a, errA, b, errB))
		}
	}
	// Uploads: every acknowledged one on disk and through the API, same SHA-256.
	rep.Check.UploadsAcknowledged = len(r.uploads)
	for _, u := range r.uploads {
		got, err := fileSHA256(u.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			rep.Check.UploadsLost = append(rep.Check.UploadsLost, u.Path)
			continue
		case err != nil || got != u.SHA256:
			rep.Check.UploadsCorrupt = append(rep.Check.UploadsCorrupt, fmt.Sprintf("%s: disk %s %v, want %s", u.Path, got, err, u.SHA256))
			continue
		}
		if got, err := r.readBack(ctx, u.Path); err != nil || got != u.SHA256 {
			rep.Check.UploadsCorrupt = append(rep.Check.UploadsCorrupt, fmt.Sprintf("%s: API read %s %v, want %s", u.Path, got, err, u.SHA256))
		}
	}
	rep.Check.DownloadsCorrupt = r.corruptDL
	// Audit: each acknowledged upload and transfer creation has its entry (by request id).
	ids, err := r.auditIDs(ctx)
	if err != nil {
		rep.Check.AuditError = err.Error()
	}
	// Each request id is the soak's own, sent once: an acknowledged action has exactly one
	// entry (more would be an audit spool replayed twice into the database).
	expect := func(id, what string) {
		rep.Check.AuditExpected++
		switch n := ids[id]; {
		case n == 0:
			rep.Check.AuditMissing = append(rep.Check.AuditMissing, what)
		case n > 1:
			rep.Check.AuditDuplicated = append(rep.Check.AuditDuplicated, fmt.Sprintf("%s (%d entries)", what, n))
		}
	}
	for _, u := range r.uploads {
		expect(u.RequestID, "upload "+u.RequestID+" "+u.Path)
	}
	for _, t := range r.transfers {
		expect(t.RequestID, "transfer "+t.RequestID+" "+t.ID)
	}
	for _, id := range r.linkAudit {
		expect(id, "link "+id)
	}
	r.checkDiskFull(ctx, rep)
	// Temporary files of failed requests (an upload in flight at a SIGKILL, one whose SSH
	// connection died) go once their records' leases lapse: await that, then count what stayed.
	start := time.Now()
	rep.Check.LeftoversAtStop = len(r.leftovers())
	for rep.Check.Leftovers = r.leftovers(); len(rep.Check.Leftovers) > 0 && time.Since(start) < cleanupWait; rep.Check.Leftovers = r.leftovers() {
		select {
		case <-ctx.Done():
			return rep
		case <-time.After(200 * time.Millisecond):
		}
	}
	rep.Check.CleanupSeconds = time.Since(start).Seconds()
	rep.summarize(r.results, r.windows)
	return rep
}

func (r *run) readBack(ctx context.Context, p string) (string, error) {
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", r.base+"/v1/systems/a/content/"+remote(p), nil)
		st, _, body, err := r.send(req)
		if err == nil && st == 200 {
			sum := sha256.Sum256(body)
			return hex.EncodeToString(sum[:]), nil
		}
		last = fmt.Errorf("status %d %v", st, err)
		time.Sleep(500 * time.Millisecond)
	}
	return "", last
}

// auditIDs pages through GET /v1/audit and returns how many entries each request id has.
func (r *run) auditIDs(ctx context.Context) (map[string]int, error) {
	ids := map[string]int{}
	before := int64(0)
	for {
		path := "/v1/audit?limit=1000"
		if before > 0 {
			path += "&before=" + strconv.FormatInt(before, 10)
		}
		var out struct {
			Entries []struct {
				RequestID string `json:"request_id"`
			} `json:"entries"`
			NextBefore int64 `json:"next_before"`
		}
		st, _, err := r.call(ctx, "GET", path, nil, &out)
		if err != nil || st != 200 {
			return ids, fmt.Errorf("GET %s: %d %v", path, st, err)
		}
		for _, e := range out.Entries {
			ids[e.RequestID]++
		}
		if out.NextBefore == 0 {
			return ids, nil
		}
		before = out.NextBefore
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
