package sshtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// Netns is a network namespace created for one test and joined to the root namespace by a veth
// pair, so the test reaches NsIP and processes inside reach HostIP. Loopback inside the namespace
// is its own: nothing in the root namespace can reach it.
type Netns struct {
	// Name is the namespace's name for `ip netns exec`.
	Name string
	// HostIP is the root namespace's end of the veth pair, NsIP the namespace's.
	HostIP, NsIP string
	hostIf       string
}

// NewNetns creates a namespace with a /30 veth link to the root namespace (addresses in
// 10.200.0.0/13 not already in use) and removes it when the test ends.
func NewNetns(tb testing.TB) *Netns {
	tb.Helper()
	n, err := newNetns(context.Background())
	if err != nil {
		tb.Fatalf("sshtest: netns: %v", err)
	}
	tb.Cleanup(n.Close)
	return n
}

func newNetns(ctx context.Context) (*Netns, error) {
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("random id: %w", err)
	}
	tag := hex.EncodeToString(id[:])
	used, err := exec.CommandContext(ctx, "ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("ip addr show: %w", err)
	}
	var subnet string
	for i := 0; i < 64 && subnet == ""; i++ {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		cand := fmt.Sprintf("10.%d.%d.", 200+int(b[0])%8, int(b[1]))
		if !bytes.Contains(used, []byte(" "+cand)) {
			subnet = cand
		}
	}
	if subnet == "" {
		return nil, errors.New("no free 10.200.0.0/13 subnet")
	}
	n := &Netns{Name: "sshapi-jump-" + tag, HostIP: subnet + "1", NsIP: subnet + "2", hostIf: "sj" + tag + "h"}
	nsIf := "sj" + tag + "n"
	steps := [][]string{
		{"netns", "add", n.Name},
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", n.Name},
		{"addr", "add", n.HostIP + "/30", "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
		{"-n", n.Name, "addr", "add", n.NsIP + "/30", "dev", nsIf},
		{"-n", n.Name, "link", "set", nsIf, "up"},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, "ip", s...).CombinedOutput(); err != nil {
			n.Close()
			return nil, fmt.Errorf("ip %s (tests must run as root): %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return n, nil
}

// Close deletes the namespace and the veth pair.
func (n *Netns) Close() {
	_ = exec.Command("ip", "link", "del", n.hostIf).Run()
	_ = exec.Command("ip", "netns", "del", n.Name).Run()
}

// JumpPair is a jump host and a target that only the jump host can reach, both real sshd
// processes inside one test namespace:
//   - Jump listens on Netns.NsIP port 22, reachable from the test over the veth pair, and
//     forwards TCP (AllowTcpForwarding yes) with a debug log of every direct-tcpip request;
//   - Target listens on 127.0.0.1 inside the namespace only. Its Addr is what the jump host
//     dials; the same address in the test's own namespace is refused (its port is chosen free
//     there).
//
// Each has its own host key and authorized client key. Restart is not supported on either.
type JumpPair struct {
	Netns  *Netns
	Jump   *Server
	Target *Server
}

// NewJumpPair starts the pair for a test and stops it when the test ends. opts.ExtraConfig
// applies to the target.
func NewJumpPair(tb testing.TB, opts Options) *JumpPair {
	tb.Helper()
	ns := NewNetns(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, err := freePort()
	if err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	topts := opts
	topts.Dir = tb.TempDir()
	target, err := startInNetns(ctx, ns, "127.0.0.1", port, topts)
	if err != nil {
		tb.Fatalf("sshtest: target sshd: %v", err)
	}
	tb.Cleanup(func() { _ = target.Close() })
	jopts := Options{User: opts.User, Dir: tb.TempDir(), ExtraConfig: "AllowTcpForwarding yes\nLogLevel DEBUG1"}
	jump, err := startInNetns(ctx, ns, ns.NsIP, 22, jopts)
	if err != nil {
		tb.Fatalf("sshtest: jump sshd: %v", err)
	}
	tb.Cleanup(func() { _ = jump.Close() })
	if err := waitBannerVia(ctx, jump, target.Addr); err != nil {
		tb.Fatalf("sshtest: target sshd behind the jump host: %v: %s", err, target.tailLog())
	}
	return &JumpPair{Netns: ns, Jump: jump, Target: target}
}

// startInNetns starts an sshd inside ns listening on host:port, configured like Start's.
func startInNetns(ctx context.Context, ns *Netns, host string, port int, opts Options) (*Server, error) {
	if opts.User == "" {
		opts.User = DefaultUser
	}
	if err := os.Chmod(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod dir: %w", err)
	}
	home, err := EnsureUser(ctx, opts.User)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, fmt.Errorf("privsep dir: %w", err)
	}
	s := &Server{User: opts.User, Home: home, Dir: opts.Dir, Host: host, Port: port,
		Addr: net.JoinHostPort(host, strconv.Itoa(port))}
	hostPEM, hostPub, _, err := newKey()
	if err != nil {
		return nil, err
	}
	s.HostKey = hostPub
	var clientPub ssh.PublicKey
	if s.PrivateKeyPEM, clientPub, s.Signer, err = newKey(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Dir, "host_ed25519_key"), hostPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write host key: %w", err)
	}
	if s.keysDir, err = os.MkdirTemp("", "sshtest-keys-"); err != nil {
		return nil, fmt.Errorf("keys dir: %w", err)
	}
	if err := os.Chmod(s.keysDir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod keys dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.keysDir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o644); err != nil {
		return nil, fmt.Errorf("write authorized_keys: %w", err)
	}
	cfg := fmt.Sprintf(`Port %d
ListenAddress %s
HostKey %[3]s/host_ed25519_key
PidFile %[3]s/sshd.pid
AuthorizedKeysFile %[6]s/authorized_keys
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowUsers %[4]s
PrintMotd no
Subsystem sftp /usr/lib/openssh/sftp-server
%[5]s
LogLevel VERBOSE
`, port, host, opts.Dir, opts.User, opts.ExtraConfig, s.keysDir)
	if err := os.WriteFile(filepath.Join(opts.Dir, "sshd_config"), []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("write sshd_config: %w", err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns.Name, SSHDPath, "-D", "-f", filepath.Join(opts.Dir, "sshd_config"),
		"-E", filepath.Join(opts.Dir, "sshd.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sshd in %s: %w", ns.Name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.cmd = cmd
	if host == ns.NsIP { // reachable from here: wait for its banner
		if err := waitBanner(ctx, s.Addr, exited); err != nil {
			s.Kill()
			return nil, fmt.Errorf("%w: %s %s", err, stderr.String(), s.tailLog())
		}
	}
	return s, nil
}

// waitBannerVia waits until addr, dialed by the jump host, answers with an SSH banner.
func waitBannerVia(ctx context.Context, jump *Server, addr string) error {
	cfg := jump.ClientConfig()
	client, err := ssh.Dial("tcp", jump.Addr, cfg)
	if err != nil {
		return fmt.Errorf("log in to the jump host: %w", err)
	}
	defer client.Close()
	var last error
	for ctx.Err() == nil {
		c, err := client.DialContext(ctx, "tcp", addr)
		if err == nil {
			buf := make([]byte, 4)
			_, err = io.ReadFull(c, buf)
			c.Close()
			if err == nil && string(buf) == "SSH-" {
				return nil
			}
		}
		last = err
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return fmt.Errorf("no banner from %s via %s: %v: %w", addr, jump.Addr, last, ctx.Err())
}
