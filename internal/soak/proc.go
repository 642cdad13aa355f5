package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instance is one `sshapi serve` subprocess; it keeps its address and data directory across
// restarts, so the load balancer's entry for it stays valid.
type instance struct {
	name, addr, dataDir, logPath string
	bin                          string
	env                          []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start runs the instance and waits for its /readyz.
func (in *instance) start(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(in.bin, "serve")
	cmd.Env = append(append(os.Environ(), in.env...), "SSHAPI_ADDR="+in.addr, "SSHAPI_DATA_DIR="+in.dataDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", in.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	in.cmd, in.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if ready("http://" + in.addr + "/readyz") {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("instance %s exited at start: %s", in.name, tailFile(in.logPath, 2000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("instance %s not ready after 60s: %s", in.name, tailFile(in.logPath, 2000))
}

func ready(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// signal sends sig and waits (up to wait) for the process to end; SIGKILL after that.
func (in *instance) signal(sig syscall.Signal, wait time.Duration) {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.cmd = nil
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
	}
}

// pid is the running process's id, 0 when stopped.
func (in *instance) pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		return 0
	}
	return in.cmd.Process.Pid
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// procStat reads a process's resident memory (bytes) and thread count from /proc.
func procStat(pid int) (rss int64, threads int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb * 1024
		case "Threads:":
			threads, _ = strconv.Atoi(f[1])
		}
	}
	return rss, threads
}

// haproxy is a real load balancer in front of the instances, health-checking /readyz.
type haproxy struct {
	addr, dir string
	cmd       *exec.Cmd
	done      chan struct{}
}

// HAProxyPath is where Debian's haproxy package installs it.
const HAProxyPath = "/usr/sbin/haproxy"

func startHAProxy(ctx context.Context, dir string, backends []*instance) (*haproxy, error) {
	if _, err := os.Stat(HAProxyPath); err != nil {
		return nil, fmt.Errorf("%s not found (apt-get install haproxy; scripts/install-deps): %w", HAProxyPath, err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 2000
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout queue 10s
    retries 3
    option redispatch
frontend soak
    bind %s
    default_backend sshapi
backend sshapi
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
`, addr)
	for _, in := range backends {
		fmt.Fprintf(&b, "    server %s %s\n", in.name, in.addr)
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "haproxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(HAProxyPath, "-db", "-f", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	h := &haproxy{addr: addr, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ready("http://" + addr + "/readyz") {
			return h, nil
		}
		select {
		case <-h.done:
			return nil, fmt.Errorf("haproxy exited: %s", tailFile(logPath, 2000))
		case <-ctx.Done():
			h.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	h.Close()
	return nil, errors.New("haproxy did not answer /readyz: " + tailFile(logPath, 2000))
}

func (h *haproxy) Close() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.done
	}
}
