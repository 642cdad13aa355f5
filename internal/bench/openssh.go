package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// SSHEndpoint is how the OpenSSH and Python peers reach the SSH server directly.
type SSHEndpoint struct {
	Host string
	Port int
	User string
	// KeyFile is the private key (0600); KnownHostsFile lists the server's host key.
	KeyFile        string
	KnownHostsFile string
	// HostKey is the server's host key in authorized_keys form ("ssh-ed25519 AAAA...").
	HostKey string
}

// Addr is host:port.
func (e SSHEndpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// WriteSSHFiles writes the private key and a known_hosts file for e into dir and fills in
// e.KeyFile and e.KnownHostsFile.
func WriteSSHFiles(dir string, e SSHEndpoint, keyPEM []byte) (SSHEndpoint, error) {
	e.KeyFile = filepath.Join(dir, "id_bench")
	if err := os.WriteFile(e.KeyFile, keyPEM, 0o600); err != nil {
		return e, fmt.Errorf("write key: %w", err)
	}
	host := e.Host
	if e.Port != 22 {
		host = fmt.Sprintf("[%s]:%d", e.Host, e.Port)
	}
	e.KnownHostsFile = filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(e.KnownHostsFile, []byte(host+" "+e.HostKey+"\n"), 0o600); err != nil {
		return e, fmt.Errorf("write known_hosts: %w", err)
	}
	return e, nil
}

// sshArgs are the options every OpenSSH client invocation gets: no user config, strict host
// key checking against our known_hosts, only our key, never a prompt.
func (e SSHEndpoint) sshArgs(extra ...string) []string {
	args := []string{
		"-F", "/dev/null",
		"-p", strconv.Itoa(e.Port),
		"-l", e.User,
		"-i", e.KeyFile,
		"-o", "IdentitiesOnly=yes",
		"-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + e.KnownHostsFile,
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "ConnectTimeout=30",
	}
	return append(args, extra...)
}

// runSSH runs the OpenSSH client once and maps its failure to an error kind.
func runSSH(ctx context.Context, args []string) error {
	cmd := exec.CommandContext(ctx, "ssh", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = nil // discarded
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err == nil || errors.Is(err, exec.ErrWaitDelay) {
		// ErrWaitDelay: ssh exited with status 0 but a descendant kept its stderr open.
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("ssh: %w", ctx.Err())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("start ssh: %w", err)
	}
	if code := ee.ExitCode(); code != 255 {
		return &ExitError{Status: code}
	}
	msg := strings.TrimSpace(stderr.String())
	return &KindError{K: sshStderrKind(msg), Msg: truncate(msg, 300)}
}

// sshStderrKind classifies the OpenSSH client's own failures (exit status 255) by its message.
func sshStderrKind(msg string) string {
	switch {
	case strings.Contains(msg, "kex_exchange_identification"), strings.Contains(msg, "Connection closed by"),
		strings.Contains(msg, "Connection reset by peer"):
		return "ssh: dropped before auth (MaxStartups)"
	case strings.Contains(msg, "Connection refused"):
		return "transport: connection refused"
	case strings.Contains(msg, "open failed"), strings.Contains(msg, "refused by peer"),
		strings.Contains(msg, "session request failed"):
		return "ssh: session refused (MaxSessions)"
	case strings.Contains(msg, "Permission denied"):
		return "ssh: authentication failed"
	case strings.Contains(msg, "Host key verification failed"):
		return "ssh: host key"
	case strings.Contains(msg, "timed out"):
		return "timeout"
	}
	if msg == "" {
		return "ssh: exit 255 (no message)"
	}
	return "ssh: exit 255"
}

// OpenSSHOp returns an Op that runs command with a new `ssh` process and a new SSH connection
// per request (handshake, key exchange and authentication every time).
func OpenSSHOp(e SSHEndpoint, command string) Op {
	args := e.sshArgs("-o", "ControlMaster=no", "-o", "ControlPath=none", "-T", e.Host, command)
	return func(ctx context.Context) error { return runSSH(ctx, args) }
}

// Mux is the OpenSSH multiplexed peer: it keeps Masters master connections open
// (ControlMaster) and runs every request as a short `ssh -S` client on one of them, round
// robin. The server's MaxSessions caps each master's concurrent sessions.
type Mux struct {
	endpoint SSHEndpoint
	masters  int
	dir      string
	cmds     []*exec.Cmd
	waits    []chan error
	next     atomic.Uint64
	mu       sync.Mutex
}

// NewMux returns a stopped Mux with n masters.
func NewMux(e SSHEndpoint, n int) *Mux {
	return &Mux{endpoint: e, masters: max(n, 1)}
}

func (m *Mux) socket(i int) string { return filepath.Join(m.dir, "m"+strconv.Itoa(i)) }

// Start opens the master connections one after another and waits until each accepts clients.
func (m *Mux) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, err := os.MkdirTemp("", "sshapi-mux-")
	if err != nil {
		return fmt.Errorf("mux dir: %w", err)
	}
	m.dir = dir
	for i := range m.masters {
		args := m.endpoint.sshArgs("-M", "-S", m.socket(i), "-N", "-o", "ControlPersist=no", m.endpoint.Host)
		cmd := exec.Command("ssh", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			m.stopLocked()
			return fmt.Errorf("start ssh master: %w", err)
		}
		w := make(chan error, 1)
		go func() { w <- cmd.Wait() }()
		m.cmds, m.waits = append(m.cmds, cmd), append(m.waits, w)
		if err := m.waitReady(ctx, i, w); err != nil {
			m.stopLocked()
			return fmt.Errorf("ssh master %d: %w: %s", i, err, strings.TrimSpace(stderr.String()))
		}
	}
	return nil
}

func (m *Mux) waitReady(ctx context.Context, i int, exited chan error) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		check := exec.CommandContext(ctx, "ssh", m.endpoint.sshArgs("-S", m.socket(i), "-O", "check", m.endpoint.Host)...)
		if check.Run() == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("not ready within 20s")
}

// Op returns an Op that runs command over the masters.
func (m *Mux) Op(command string) Op {
	return func(ctx context.Context) error {
		i := int(m.next.Add(1) % uint64(m.masters))
		args := m.endpoint.sshArgs("-S", m.socket(i), "-o", "ControlMaster=no", "-T", m.endpoint.Host, command)
		return runSSH(ctx, args)
	}
}

// Stop closes the masters and removes their sockets.
func (m *Mux) Stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked()
	return nil
}

func (m *Mux) stopLocked() {
	for i, cmd := range m.cmds {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-m.waits[i]:
		case <-time.After(3 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-m.waits[i]
		}
	}
	m.cmds, m.waits = nil, nil
	if m.dir != "" {
		_ = os.RemoveAll(m.dir)
		m.dir = ""
	}
}
