package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// haproxy is a real load balancer in front of the instances, health-checking /readyz.
type haproxy struct {
	addr, dir string
	cmd       *exec.Cmd
	done      chan struct{}
}

// HAProxyPath is where Debian's haproxy package installs it.
const HAProxyPath = "/usr/sbin/haproxy"

// noBackendProblem is the body of the balancer's own 503 (no instance is up, or none could be
// connected to within the retries), in the shape of the API's problem answers.
const noBackendProblem = `{"type":"about:blank","title":"Service Unavailable","status":503,` +
	`"detail":"no sshapi instance is ready (load balancer); retry after the interval in Retry-After"}`

// haproxyConfig is the balancer's configuration: round robin over the backends, a /readyz
// check every 500 ms (down after two failures, up after one success), three retries with
// redispatch to another instance when a connection is refused, and — what a client needs to
// wait instead of failing — HAProxy's own 503 answered like the API's: problem+json with
// Retry-After. Requests in flight on an instance marked down are left to finish: its /readyz
// fails while the database is away, and cutting them (on-marked-down shutdown-sessions) turned
// requests that were being answered into 502s and dropped connections; a killed instance's
// connections end by themselves and a stopping one drains its own.
func haproxyConfig(listen string, backends []*instance) string {
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
    http-error status 503 content-type application/problem+json string '%s' hdr Retry-After 1
frontend soak
    bind %s
    default_backend sshapi
backend sshapi
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server check inter 500ms fall 2 rise 1
`, noBackendProblem, listen)
	for _, in := range backends {
		fmt.Fprintf(&b, "    server %s %s\n", in.name, in.addr)
	}
	return b.String()
}

// startHAProxy writes the configuration into dir, starts HAProxy and, if wait is set, waits until
// a request through it reaches a ready instance.
func startHAProxy(ctx context.Context, dir string, backends []*instance, wait bool) (*haproxy, error) {
	if _, err := os.Stat(HAProxyPath); err != nil {
		return nil, fmt.Errorf("%s not found (apt-get install haproxy; scripts/install-deps): %w", HAProxyPath, err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(addr, backends)), 0o600); err != nil {
		return nil, fmt.Errorf("haproxy config: %w", err)
	}
	logPath := filepath.Join(dir, "haproxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("haproxy log: %w", err)
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
		if wait && ready("http://"+addr+"/readyz") || !wait && listening(addr) {
			return h, nil
		}
		select {
		case <-h.done:
			return nil, fmt.Errorf("haproxy exited: %s", tailFile(logPath, 2000))
		case <-ctx.Done():
			h.Close()
			return nil, fmt.Errorf("waiting for haproxy: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	h.Close()
	return nil, errors.New("haproxy did not answer /readyz: " + tailFile(logPath, 2000))
}

// Close stops HAProxy (SIGTERM, then SIGKILL after 5 s).
func (h *haproxy) Close() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.done
	}
}
