package service

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// serveEnv, when set, makes this test binary run the service (with the config file it names)
// instead of the tests: the memory tests measure a real service process from /proc.
const serveEnv = "SSHAPI_TEST_SERVE_CONFIG"

func TestMain(m *testing.M) {
	if p := os.Getenv(serveEnv); p != "" {
		os.Exit(serveForTest(p))
	}
	os.Exit(m.Run())
}

// serveForTest runs the service until SIGTERM, printing "ADDR <host:port>" once it listens.
func serveForTest(path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	svc, err := New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := svc.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ADDR %s\n", svc.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// procService is a service process started from this test binary with embedded defaults.
type procService struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string
	tok  string
}

func startProcService(t *testing.T) *procService {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(cfgPath, []byte("addr: 127.0.0.1:0\ndata_dir: "+data+"\nlog_level: warn\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+cfgPath)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	if err != nil || !ok {
		t.Fatalf("service did not start: %q %v", line, err)
	}
	sec, err := DevSecret(data)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := auth.IssueHS256(sec, "mallory", time.Hour, time.Now())
	return &procService{t: t, cmd: cmd, base: "http://" + addr, tok: tok}
}

// status reads a field of /proc/<pid>/status in bytes (VmRSS, VmHWM).
func (p *procService) status(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	p.t.Fatalf("no %s in /proc status", field)
	return 0
}

// do sends a request and returns the status and the number of body bytes, read at full speed
// and discarded (first 512 bytes kept for messages).
func (p *procService) do(method, path string, body any, hdr ...string) (int, int64, string) {
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, p.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+p.tok)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err.Error()
	}
	defer res.Body.Close()
	var head bytes.Buffer
	n, _ := io.Copy(io.Discard, io.TeeReader(res.Body, &limitedBuffer{&head, 512}))
	return res.StatusCode, n, head.String()
}

type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (p *procService) register(srv *sshtest.Server, id string) {
	p.t.Helper()
	if code, _, msg := p.do("POST", "/v1/systems", map[string]any{"id": id, "host": srv.Host, "port": srv.Port, "host_keys": []string{srv.AuthorizedHostKey()}}); code != 201 {
		p.t.Fatalf("create system: %d %s", code, msg)
	}
	if code, _, msg := p.do("PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)}); code != 200 {
		p.t.Fatalf("put credential: %d %s", code, msg)
	}
}

// rssBound is the whole service process's peak RSS allowed under every hostile scenario with
// default settings (the README's "Limits and quotas" states it).
const rssBound = 512 << 20

const hostileCommand = "head -c 67108864 /dev/zero; head -c 67108864 /dev/zero >&2"

// TestHostileRequestsKeepRSSBounded runs the issue's hostile requests against a real service
// process with default settings and reads its peak RSS (VmHWM) from /proc: each scenario must
// stay under rssBound. Every request must end in a documented answer (200, or 503 when a
// budget stayed exhausted).
func TestHostileRequestsKeepRSSBounded(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	bigDir := srv.MkTemp(t)
	const entries = 200_000
	for i := range entries {
		f, err := os.Create(filepath.Join(bigDir, fmt.Sprintf("entry-with-a-longish-name-%07d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	big := filepath.Join(srv.MkTemp(t), "big.bin")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Truncate(64 << 20)
	f.Close()
	u, _ := user.Lookup(srv.User)
	uid, _ := strconv.Atoi(u.Uid)
	_ = os.Chown(big, uid, 0)

	parallel := func(n int, fn func(i int) (int, int64, string)) []string {
		var wg sync.WaitGroup
		out := make([]string, n)
		for i := range n {
			wg.Go(func() {
				code, size, msg := fn(i)
				out[i] = fmt.Sprintf("%d/%dB", code, size)
				if code != 200 && code != 503 {
					out[i] += " " + msg
				}
			})
		}
		wg.Wait()
		return out
	}
	command := func(p *procService, id string, hdr ...string) (int, int64, string) {
		return p.do("POST", "/v1/systems/"+id+"/commands", map[string]any{"command": hostileCommand, "max_output_bytes": 33554432}, hdr...)
	}
	scenarios := []struct {
		name string
		run  func(p *procService) []string
	}{
		{"3 concurrent buffered 32+32 MiB commands (the default cap)", func(p *procService) []string {
			return parallel(3, func(int) (int, int64, string) { return command(p, "hpc") })
		}},
		{"6 concurrent buffered 32+32 MiB commands (the default cap)", func(p *procService) []string {
			return parallel(6, func(int) (int, int64, string) { return command(p, "hpc") })
		}},
		{"3 concurrent NDJSON commands of 64+64 MiB output", func(p *procService) []string {
			return parallel(3, func(int) (int, int64, string) { return command(p, "hpc", "Accept", "application/x-ndjson") })
		}},
		{"fan-out of the command to 3 systems, NDJSON", func(p *procService) []string {
			return parallel(1, func(int) (int, int64, string) {
				return p.do("POST", "/v1/commands", map[string]any{"systems": []string{"hpc", "hpc2", "hpc3"}, "command": hostileCommand, "max_output_bytes": 33554432}, "Accept", "application/x-ndjson")
			})
		}},
		{fmt.Sprintf("listing a %d-entry directory with limit=1, 4 at once", entries), func(p *procService) []string {
			return parallel(4, func(int) (int, int64, string) { return p.do("GET", "/v1/systems/hpc/ls"+bigDir+"?limit=1", nil) })
		}},
		{"16 concurrent downloads of a 64 MiB file", func(p *procService) []string {
			return parallel(16, func(int) (int, int64, string) { return p.do("GET", "/v1/systems/hpc/content"+big, nil) })
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			p := startProcService(t)
			for _, id := range []string{"hpc", "hpc2", "hpc3"} {
				p.register(srv, id)
			}
			if code, _, msg := p.do("POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}); code != 200 {
				t.Fatalf("warm-up: %d %s", code, msg)
			}
			before := p.status("VmRSS")
			start := time.Now()
			results := sc.run(p)
			peak := p.status("VmHWM")
			t.Logf("RSS before %.0f MiB, peak %.0f MiB, in %v; answers %v", float64(before)/(1<<20), float64(peak)/(1<<20), time.Since(start).Round(100*time.Millisecond), results)
			for _, r := range results {
				if !strings.HasPrefix(r, "200/") && !strings.HasPrefix(r, "503/") {
					t.Errorf("answer %s", r)
				}
			}
			if peak > rssBound {
				t.Errorf("peak RSS %d bytes, want under %d", peak, rssBound)
			}
		})
	}
}
