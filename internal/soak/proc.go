package soak

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
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

// listening reports whether something accepts TCP connections on addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
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
