package api

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/command"
)

// waitFor polls cond until it holds or d passes (state we can observe, not a sleep).
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chownToUser gives a file made here (the test sshd is local) to the remote user.
func chownToUser(t *testing.T, p, name string) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(p, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// TestCommandOutputBudget: max_output_bytes above the configured cap is a 400 naming the field;
// while one buffered command holds the whole budget another is answered 503 with Retry-After
// (streams are not held back), and once it finishes the budget is whole again.
func TestCommandOutputBudget(t *testing.T) {
	e := newEnvConfig(t, Config{CommandOutputBudgetBytes: 2 << 20, CommandOutputBudgetPerOwnerBytes: 2 << 20, CommandMaxOutputBytes: 1 << 20,
		BudgetWait: 300 * time.Millisecond}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)

	r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "true", "max_output_bytes": 2 << 20})
	if r.status != 400 || !strings.Contains(string(r.body), `"field":"max_output_bytes"`) {
		t.Fatalf("above the cap: %d %s", r.status, r.body)
	}

	holder := make(chan resp, 1)
	go func() {
		holder <- e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{
			"command":          fmt.Sprintf("touch %s/started; while [ ! -e %s/go ]; do sleep 0.05; done; echo done", dir, dir),
			"max_output_bytes": 1 << 20, "timeout_s": 30})
	}()
	waitFor(t, 20*time.Second, "the holding command to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	r = e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo hi", "max_output_bytes": 1})
	if r.status != 503 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("budget exhausted: %d %v %s", r.status, r.header, r.body)
	}
	r = e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo streamed"}, "Accept", "application/x-ndjson")
	if r.status != 200 || !strings.Contains(string(r.body), `"data":"streamed\n"`) {
		t.Fatalf("a stream while the budget is taken: %d %s", r.status, r.body)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if h := <-holder; h.status != 200 || h.json(t)["stdout"] != "done\n" {
		t.Fatalf("holder: %d %s", h.status, h.body)
	}
	r = e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo hi", "max_output_bytes": 1 << 20})
	if r.status != 200 || r.json(t)["stdout"] != "hi\n" {
		t.Fatalf("after release: %d %s", r.status, r.body)
	}
}

// TestCommandOutputBudgetShares: while alice's long buffered command holds her whole share of
// the output budget, her next one waits for her share and is answered 503 saying so, and bob's
// runs at once from the rest of the budget (before the share, alice's next was admitted too, so
// two such commands of hers held all of it and everyone else's were the 503s).
func TestCommandOutputBudgetShares(t *testing.T) {
	e := newEnvConfig(t, Config{CommandOutputBudgetBytes: 4 << 20, CommandOutputBudgetPerOwnerBytes: 2 << 20, CommandMaxOutputBytes: 1 << 20,
		BudgetWait: 300 * time.Millisecond}, nil)
	e.register("alice", "hpc")
	e.register("bob", "hpc")
	dir := e.srv.MkTemp(t)
	holder := make(chan resp, 1)
	go func() {
		holder <- e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{
			"command":          fmt.Sprintf("touch %s/started; while [ ! -e %s/go ]; do sleep 0.05; done; echo done", dir, dir),
			"max_output_bytes": 1 << 20, "timeout_s": 30})
	}()
	waitFor(t, 20*time.Second, "alice's holding command to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo hi", "max_output_bytes": 1 << 20})
	if r.status != 503 || !strings.Contains(string(r.body), "your whole share") || r.header.Get("Retry-After") == "" {
		t.Fatalf("alice past her share: %d %s", r.status, r.body)
	}
	r = e.do("bob", "POST", "/v1/systems/hpc/commands", map[string]any{"command": "echo hi", "max_output_bytes": 1 << 20})
	if r.status != 200 || r.json(t)["stdout"] != "hi\n" {
		t.Fatalf("bob while alice holds her share: %d %s", r.status, r.body)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if h := <-holder; h.status != 200 || h.json(t)["stdout"] != "done\n" {
		t.Fatalf("holder: %d %s", h.status, h.body)
	}
}

// TestNULOutputIsCompact: 4 MiB of NUL bytes on each stream come base64 (5.6 MB each), not as
// 25 MB of \u0000 escapes, and decode to the bytes printed.
func TestNULOutputIsCompact(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	const n = 4 << 20
	r := e.do("alice", "POST", "/v1/systems/hpc/commands", map[string]any{
		"command": fmt.Sprintf("head -c %d /dev/zero; head -c %d /dev/zero >&2", n, n), "max_output_bytes": n})
	var res command.Result
	if err := json.Unmarshal(r.body, &res); err != nil || r.status != 200 {
		t.Fatalf("%d %v %.300s", r.status, err, r.body)
	}
	if len(r.body) > 2*base64.StdEncoding.EncodedLen(n)+1024 || res.StdoutEncoding != "base64" || res.StderrEncoding != "base64" {
		t.Fatalf("response of %d bytes, encodings %q %q", len(r.body), res.StdoutEncoding, res.StderrEncoding)
	}
	for _, s := range []string{res.Stdout, res.Stderr} {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || !bytes.Equal(b, make([]byte, n)) {
			t.Fatalf("decoded %d bytes: %v", len(b), err)
		}
	}
}

// rawRequest sends an HTTP/1.1 request on a fresh connection with a small receive buffer and
// returns the connection, for clients that stop reading.
func rawRequest(t *testing.T, e *env, method, path, body string, hdr ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", method, path, e.token("alice"), len(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 512)
	if _, err := io.ReadAtLeast(c, head, 64); err != nil || !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		t.Fatalf("response start %q: %v", head, err)
	}
	return c
}

// TestStalledStreamReleasesChannel: a client that stops reading an NDJSON stream of endless
// output gets its command killed and its SSH channel freed, either once the command's timeout
// (plus the kill's 3 s grace) has passed, or after stream_write_timeout without progress,
// whichever comes first; in the second case the handler has given the client up too.
func TestStalledStreamReleasesChannel(t *testing.T) {
	tests := []struct {
		name     string
		stall    time.Duration
		timeoutS int
		abandons bool // the handler's write failed within the test
	}{
		{"command timeout passes", 10 * time.Minute, 2, false},
		{"no progress for stream_write_timeout", time.Second, 600, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnvConfig(t, Config{StreamWriteTimeout: tt.stall}, nil)
			e.register("alice", "hpc")
			body := fmt.Sprintf(`{"command":"exec yes stalled-stream-test","timeout_s":%d,"max_output_bytes":33554432}`, tt.timeoutS)
			_ = rawRequest(t, e, "POST", "/v1/systems/hpc/commands", body, "Accept", "application/x-ndjson")
			if e.pool.Stats().ChannelsInUse == 0 {
				t.Fatal("no channel in use while the command streams")
			}
			start := time.Now()
			waitFor(t, 60*time.Second, "the stalled stream's channel to be released", func() bool { return e.pool.Stats().ChannelsInUse == 0 })
			t.Logf("channel released %v after the client stopped reading", time.Since(start).Round(100*time.Millisecond))
			if tt.abandons {
				waitFor(t, 30*time.Second, "the handler to abandon the stalled client", func() bool {
					return strings.Contains(e.log.String(), "NDJSON stream abandoned by the client")
				})
			}
		})
	}
}

// TestUploadIdleAborted: an upload whose body goes quiet for upload_idle_timeout is answered
// 408 and leaves neither the file nor a temporary behind.
func TestUploadIdleAborted(t *testing.T) {
	e := newEnvConfig(t, Config{UploadIdleTimeout: 300 * time.Millisecond}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(bytes.Repeat([]byte("x"), 100_000)) }() // then silence
	req, _ := http.NewRequest("PUT", e.url+"/v1/systems/hpc/content"+dir+"/idle.bin", pr)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("idle upload: %d %s", res.StatusCode, body)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v %v", left, err)
	}
}

// TestFanoutStreamsAsSystemsFinish: with NDJSON, /v1/commands sends each system's line when it
// finishes. The first system to start waits until the client has read the other's line, so a
// response built at the end would never complete.
func TestFanoutStreamsAsSystemsFinish(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "a")
	e.register("alice", "b")
	dir := e.srv.MkTemp(t)
	cmd := fmt.Sprintf("cd %s && if mkdir lock 2>/dev/null; then while [ ! -e released ]; do sleep 0.05; done; echo slow; else echo fast; fi", dir)
	body, _ := json.Marshal(map[string]any{"systems": []string{"a", "b"}, "command": cmd, "timeout_s": 30})
	req, _ := http.NewRequest("POST", e.url+"/v1/commands", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	req.Header.Set("Accept", "application/x-ndjson")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(res.Body)
	var got []string
	systems := map[string]bool{}
	for sc.Scan() {
		var line struct {
			System string          `json:"system"`
			Result *command.Result `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Result == nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, line.Result.Stdout)
		systems[line.System] = true
		if len(got) == 1 {
			if err := os.WriteFile(filepath.Join(dir, "released"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if strings.Join(got, "") != "fast\nslow\n" || !systems["a"] || !systems["b"] {
		t.Fatalf("lines %q for systems %v", got, systems)
	}
}

// TestDownloadBuffersBounded: with room for one download buffer, a second download waits
// budget_wait and is answered 503 with Retry-After; the first client stops reading, its
// download ends after stream_write_timeout and the buffer serves the next download.
func TestDownloadBuffersBounded(t *testing.T) {
	e := newEnvConfig(t, Config{DownloadBufferBytes: 1 << 20, DownloadBufferBudgetBytes: 1 << 20,
		BudgetWait: 300 * time.Millisecond, StreamWriteTimeout: time.Second}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	big := filepath.Join(dir, "big.bin")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Truncate(256 << 20) // sparse: more than any socket buffers
	f.Close()
	small := filepath.Join(dir, "small.txt")
	if err := os.WriteFile(small, []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{big, small} {
		chownToUser(t, p, e.srv.User)
	}
	_ = rawRequest(t, e, "GET", "/v1/systems/hpc/content"+big, "")
	r := e.do("alice", "GET", "/v1/systems/hpc/content"+small, nil)
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("second download while the buffer is taken: %d %s", r.status, r.body)
	}
	waitFor(t, 30*time.Second, "the stalled download to give its buffer back", func() bool {
		r = e.do("alice", "GET", "/v1/systems/hpc/content"+small, nil)
		return r.status == 200
	})
	if string(r.body) != "small" {
		t.Fatalf("download: %q", r.body)
	}
}

// TestListingWindow: offset+limit beyond list_max_window is a 400 naming offset; after= pages on.
func TestListingWindow(t *testing.T) {
	e := newEnvConfig(t, Config{ListMaxWindow: 10}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	for i := range 12 {
		p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := e.do("alice", "GET", "/v1/systems/hpc/ls"+dir+"?offset=5&limit=6", nil)
	if r.status != 400 || !strings.Contains(string(r.body), `"field":"offset"`) {
		t.Fatalf("beyond the window: %d %s", r.status, r.body)
	}
	r = e.do("alice", "GET", "/v1/systems/hpc/ls"+dir+"?limit=10", nil)
	m := r.json(t)
	if r.status != 200 || m["next_after"] != "f09" || m["total"] != float64(12) {
		t.Fatalf("first page: %d %s", r.status, r.body)
	}
	r = e.do("alice", "GET", "/v1/systems/hpc/ls"+dir+"?limit=10&after=f09", nil)
	m = r.json(t)
	if entries, _ := m["entries"].([]any); r.status != 200 || len(entries) != 2 || m["next_after"] != nil {
		t.Fatalf("second page: %d %s", r.status, r.body)
	}
}
