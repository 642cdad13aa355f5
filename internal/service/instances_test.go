package service

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/wanem"
)

// buildOnce builds the sshapi binary once per test process.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sshapi-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sshapi")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sshapi/sshapi/cmd/sshapi").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// deployment is several `sshapi serve` processes on one PostgreSQL database with shared keys.
type deployment struct {
	t     *testing.T
	bin   string
	env   []string
	token string
}

// instance is one running `sshapi serve`.
type instance struct {
	name string
	url  string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	return newDeploymentOn(t, pgtest.New(t).NewDatabase(t))
}

// newDeploymentOn is newDeployment on database db (a postgres:// URL or a SQLite file).
func newDeploymentOn(t *testing.T, db string) *deployment {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	line, err := secret.NewKeyLine()
	if err != nil {
		t.Fatal(err)
	}
	tokenSecret := make([]byte, 32)
	_, _ = rand.Read(tokenSecret)
	keyFile, secretFile := filepath.Join(dir, "master.keys"), filepath.Join(dir, "token.secret")
	if err := os.WriteFile(keyFile, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(base64.StdEncoding.EncodeToString(tokenSecret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := auth.IssueHS256(tokenSecret, "alice", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &deployment{t: t, bin: bin, token: tok, env: []string{
		"SSHAPI_DATABASE=" + db,
		"SSHAPI_KEYS_MASTER_KEY_FILE=" + keyFile,
		"SSHAPI_KEYS_TOKEN_SECRET_FILE=" + secretFile,
		// Short leases so that failover is quick in tests.
		"SSHAPI_TRANSFER_LEASE_TTL=3s",
		"SSHAPI_TRANSFER_REAP_INTERVAL=500ms",
		"SSHAPI_TRANSFER_POLL_INTERVAL=100ms",
		"SSHAPI_TRANSFER_RETRY_BASE=200ms",
		"SSHAPI_LOG_LEVEL=info",
	}}
}

// start runs a new instance and waits until /readyz answers.
func (d *deployment) start(name string) *instance {
	d.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		d.t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(d.bin, "serve")
	cmd.Env = append(os.Environ(), d.env...)
	cmd.Env = append(cmd.Env, "SSHAPI_ADDR="+addr, "SSHAPI_DATA_DIR="+filepath.Join(d.t.TempDir(), name))
	in := &instance{name: name, url: "http://" + addr, cmd: cmd, log: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = in.log, in.log
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(in.done) }()
	d.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-in.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-in.done
		}
		if d.t.Failed() {
			d.t.Logf("--- log of %s ---\n%s", name, tail(in.log.String(), 4000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(in.url + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return in
			}
		}
		select {
		case <-in.done:
			d.t.Fatalf("instance %s exited: %s", name, in.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("instance %s not ready: %s", name, in.log.String())
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// stop ends an instance gracefully (SIGTERM).
func (in *instance) stop(t *testing.T) {
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("instance %s did not stop", in.name)
	}
}

// kill ends an instance with SIGKILL, as a machine failure would.
func (in *instance) kill() {
	_ = in.cmd.Process.Kill()
	<-in.done
}

// call sends a JSON request through in and decodes the JSON answer into out.
func (d *deployment) call(in *instance, method, path string, body, out any) int {
	d.t.Helper()
	code, err := d.try(in, method, path, body, out)
	if err != nil {
		d.t.Fatal(err)
	}
	return code
}

// try is call without failing the test, for goroutines.
func (d *deployment) try(in *instance, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(d.t.Context(), method, in.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+d.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s via %s: %w", method, path, in.name, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s via %s: %d %s", method, path, in.name, res.StatusCode, b)
		}
	}
	return res.StatusCode, nil
}

// mustCall is call that fails the test on a status of 300 or more.
func (d *deployment) mustCall(in *instance, method, path string, body, out any) int {
	d.t.Helper()
	var raw json.RawMessage
	code := d.call(in, method, path, body, &raw)
	if code >= 300 {
		d.t.Fatalf("%s %s via %s: %d %s", method, path, in.name, code, raw)
	}
	if out != nil {
		_ = json.Unmarshal(raw, out)
	}
	return code
}

// transferJSON is the part of a transfer the tests read.
type transferJSON struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Error      string `json:"error"`
	Attempts   int    `json:"attempts"`
	BytesTotal int64  `json:"bytes_total"`
	BytesDone  int64  `json:"bytes_done"`
	BytesRead  int64  `json:"bytes_read"`
	Streams    int    `json:"streams"`
}

func (d *deployment) transfer(in *instance, id string) transferJSON {
	d.t.Helper()
	var tr transferJSON
	d.mustCall(in, "GET", "/v1/transfers/"+id, nil, &tr)
	return tr
}

// await polls id through in until cond holds (failing on a terminal status that does not).
func (d *deployment) await(in *instance, id string, timeout time.Duration, cond func(transferJSON) bool) transferJSON {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		tr := d.transfer(in, id)
		if cond(tr) {
			return tr
		}
		switch tr.Status {
		case "succeeded", "failed", "canceled":
			d.t.Fatalf("transfer ended before the condition held: %+v", tr)
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out; transfer %+v", tr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rangesDone sums ranges_done over a transfer's items, read through in.
func (d *deployment) rangesDone(in *instance, id string) int {
	d.t.Helper()
	var res struct {
		Items []struct {
			RangesDone int `json:"ranges_done"`
		} `json:"items"`
	}
	d.mustCall(in, "GET", "/v1/transfers/"+id+"/items", nil, &res)
	n := 0
	for _, it := range res.Items {
		n += it.RangesDone
	}
	return n
}

// addSystem registers srv (reached at addr) as id through in.
func (d *deployment) addSystem(in *instance, id string, srv *sshtest.Server, addr string) {
	d.t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(port, &p)
	d.mustCall(in, "POST", "/v1/systems", map[string]any{"id": id, "host": host, "port": p, "host_keys": []string{srv.AuthorizedHostKey()}}, nil)
	d.mustCall(in, "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)}, nil)
}

func slowLink(t *testing.T, srv *sshtest.Server, rate int64) string {
	t.Helper()
	p, err := wanem.New(wanem.Config{Upstream: srv.Addr, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p.Addr().String()
}

func quick() bool { return testing.Short() || os.Getenv("SSHAPI_TEST_QUICK") != "" }

// TestSeveralInstances runs three `sshapi serve` processes on one PostgreSQL database: a system
// created through one is usable through the others; one idempotency key submitted to two at
// once yields one transfer; a cancel through B stops a run on A after at most one more range per
// stream.
func TestSeveralInstances(t *testing.T) {
	d := newDeployment(t)
	srv := sshtest.New(t, sshtest.Options{})
	a := d.start("a")
	d.addSystem(a, "hpc", srv, srv.Addr)
	d.addSystem(a, "slow", srv, slowLink(t, srv, 2<<20))
	dir := srv.MkTemp(t)
	src := filepath.Join(dir, "src.bin")
	writeRandom(t, src, 64<<20)
	owned(t, srv, src)

	// A transfer running on A (the only instance so far), 2 streams of 1 MiB ranges at 2 MiB/s.
	var tr transferJSON
	d.mustCall(a, "POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": "slow", "path": src},
		"destination": map[string]any{"system": "hpc", "path": filepath.Join(dir, "canceled.bin")}, "streams": 2, "chunk_size": 1 << 20}, &tr)
	b, c := d.start("b"), d.start("c")
	d.await(b, tr.ID, time.Minute, func(x transferJSON) bool { return x.Status == "running" && x.BytesDone > 0 })
	before := d.rangesDone(b, tr.ID)
	var canceled transferJSON
	d.mustCall(b, "DELETE", "/v1/transfers/"+tr.ID, nil, &canceled)
	if canceled.Status != "canceled" {
		t.Fatalf("cancel through b: %+v", canceled)
	}
	// A stops at its next range (or heartbeat) and removes its temporary file.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(dir, ".canceled.bin.sshapi-*"))
		if len(m) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a did not remove its temporary file after the cancel: %v", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := d.rangesDone(c, tr.ID)
	t.Logf("cancel through b: %d ranges done before, %d after (2 streams)", before, after)
	if after-before > 2 {
		t.Fatalf("a wrote %d more ranges after the cancel; at most one per stream (2)", after-before)
	}

	// The system created through a works through b and c.
	for _, in := range []*instance{b, c} {
		var out map[string]any
		d.mustCall(in, "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo via-" + in.name}, &out)
		if b, _ := json.Marshal(out); !strings.Contains(string(b), "via-"+in.name) {
			t.Fatalf("command through %s: %s", in.name, b)
		}
	}

	// One idempotency key submitted to b and c at once: one transfer.
	req := map[string]any{"source": map[string]any{"system": "hpc", "path": src},
		"destination": map[string]any{"system": "hpc", "path": filepath.Join(dir, "idem.bin")}, "idempotency_key": "k-1"}
	var wg sync.WaitGroup
	ids := make([]string, 2)
	codes := make([]int, 2)
	errs := make([]error, 2)
	for i, in := range []*instance{b, c} {
		wg.Go(func() {
			var x transferJSON
			codes[i], errs[i] = d.try(in, "POST", "/v1/transfers", req, &x)
			ids[i] = x.ID
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ids[0] == "" || ids[0] != ids[1] || codes[0] >= 300 || codes[1] >= 300 {
		t.Fatalf("same key through b and c: ids %v, statuses %v", ids, codes)
	}
	var list struct {
		Transfers []transferJSON `json:"transfers"`
	}
	d.mustCall(a, "GET", "/v1/transfers?limit=100", nil, &list)
	if len(list.Transfers) != 2 {
		t.Fatalf("%d transfers listed, want 2 (the canceled one and one for the key)", len(list.Transfers))
	}
	// Its event stream, read through an instance that may not run it, ends with "done".
	req2, _ := http.NewRequestWithContext(t.Context(), "GET", a.url+"/v1/transfers/"+ids[0]+"/events", nil)
	req2.Header.Set("Authorization", "Bearer "+d.token)
	res, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	events, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(events), "event: done") || !strings.Contains(string(events), `"status":"succeeded"`) {
		t.Fatalf("events through a: %s", tail(string(events), 2000))
	}
	d.await(c, ids[0], time.Minute, func(x transferJSON) bool { return x.Status == "succeeded" })
}

// TestFailover: a large striped transfer runs on instance A; A is killed with SIGKILL; another
// instance resumes it once the lease expires, and it completes with matching SHA-256, having
// re-read at most one range per stream.
func TestFailover(t *testing.T) {
	size, rate := int64(1<<30), int64(128<<20)
	if quick() {
		size, rate = 96<<20, 16<<20
	}
	const streams, chunk = 4, 4 << 20
	d := newDeployment(t)
	srv := sshtest.New(t, sshtest.Options{})
	a := d.start("a")
	d.addSystem(a, "src", srv, slowLink(t, srv, rate))
	d.addSystem(a, "dst", srv, srv.Addr)
	dir := srv.MkTemp(t)
	src, dst := filepath.Join(dir, "big.bin"), filepath.Join(dir, "copy.bin")
	want := writeRandom(t, src, size)
	owned(t, srv, src)
	var tr transferJSON
	d.mustCall(a, "POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": "src", "path": src},
		"destination": map[string]any{"system": "dst", "path": dst}, "streams": streams, "chunk_size": chunk}, &tr)
	d.await(a, tr.ID, 2*time.Minute, func(x transferJSON) bool { return x.BytesDone >= size/4 })
	b, c := d.start("b"), d.start("c")
	_ = c
	killedAt := time.Now()
	a.kill()
	resumed := d.await(b, tr.ID, 2*time.Minute, func(x transferJSON) bool { return x.Attempts >= 2 })
	resumeAfter := time.Since(killedAt)
	done := d.await(b, tr.ID, 10*time.Minute, func(x transferJSON) bool { return x.Status == "succeeded" })
	total := time.Since(killedAt)
	if got := fileSHA256(t, dst); got != want {
		t.Fatalf("sha256 of the copy %s, want %s", got, want)
	}
	reread := done.BytesRead - size
	t.Logf("failover: size %d MiB, %d streams of %d MiB ranges; resumed %.1fs after SIGKILL (lease 3s, reap 0.5s), "+
		"finished %.1fs after it; bytes_read - size = %d (%.2f ranges); resumed at bytes_done %d",
		size>>20, streams, chunk>>20, resumeAfter.Seconds(), total.Seconds(), reread, float64(reread)/chunk, resumed.BytesDone)
	if reread < 0 || reread > streams*chunk {
		t.Fatalf("re-read %d bytes, more than one range per stream (%d)", reread, streams*chunk)
	}
}

// writeRandom writes size random bytes to p and returns their sha256.
func writeRandom(t *testing.T, p string, size int64) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 4<<20)
	for left := size; left > 0; {
		n := min(int64(len(buf)), left)
		_, _ = rand.Read(buf[:n])
		h.Write(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		left -= n
	}
	return hex.EncodeToString(h.Sum(nil))
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// owned makes paths belong to the test sshd's user.
func owned(t *testing.T, srv *sshtest.Server, paths ...string) {
	t.Helper()
	u, err := user.Lookup(srv.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
}
