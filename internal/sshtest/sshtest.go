// Package sshtest starts a real OpenSSH sshd on a free loopback port for tests, benchmarks and
// demos. The server runs with OpenSSH's stock connection limits (MaxStartups 10:30:100,
// MaxSessions 10) unless a test asks otherwise, and logs in a dedicated test user whose login
// shell is /bin/sh, so no heavy shell rc file runs for every command.
package sshtest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// DefaultUser is the local account the test sshd logs users into. It is created on first use
// (tests run as root in CI) with /bin/sh as its shell.
const DefaultUser = "sshapi-test"

// SSHDPath is where Debian's openssh-server installs the daemon.
const SSHDPath = "/usr/sbin/sshd"

// Options tunes a test server. The zero value gives a stock server.
type Options struct {
	// User is the remote account; DefaultUser when empty.
	User string
	// Shell, when set, is made the remote account's login shell (sshd runs every command as
	// `SHELL -c LINE`), e.g. "/usr/bin/fish". Give such a server a User of its own: the
	// account keeps the shell for every test binary that logs into it.
	Shell string
	// ExtraConfig is appended to sshd_config verbatim (e.g. "MaxSessions 3").
	ExtraConfig string
	// NoSFTP leaves out the Subsystem line, as at centres that turn SFTP off: a subsystem
	// request for sftp is then refused.
	NoSFTP bool
	// Dir holds the server's files; a new temporary directory when empty.
	Dir string
	// HostKeyTypes are the host keys the server has, of "rsa", "ecdsa" and "ed25519". Empty
	// means all three, as a distribution's default sshd has (Debian: RSA, ECDSA and Ed25519).
	HostKeyTypes []string
	// HostCertificates signs every host key with a fresh test CA (Server.HostCA) and serves the
	// certificates (HostCertificate), as centres that run a host CA do.
	HostCertificates bool
	// TrustedUserCAKeys are CAs whose user certificates the server accepts (TrustedUserCAKeys).
	TrustedUserCAKeys []ssh.PublicKey
	// LogLevel is sshd's LogLevel; VERBOSE when empty. DEBUG1 logs every authentication
	// request ("userauth-request for user U service ssh-connection method M").
	LogLevel string
}

// Server is a running sshd and everything a client needs to reach it.
type Server struct {
	// Addr is host:port of the listening sshd.
	Addr string
	// Host and Port split Addr.
	Host string
	Port int
	// User is the remote account keys are authorized for.
	User string
	// Home is the remote account's home directory.
	Home string
	// HostKey is the server's Ed25519 public host key (or its first one without Ed25519).
	HostKey ssh.PublicKey
	// HostKeys are all the server's public host keys, in HostKeyTypes order.
	HostKeys []ssh.PublicKey
	// HostCA is the CA that signed the host certificates, when Options.HostCertificates.
	HostCA ssh.PublicKey
	// PrivateKeyPEM is an authorized client key in OpenSSH PEM form.
	PrivateKeyPEM []byte
	// Signer is PrivateKeyPEM parsed.
	Signer ssh.Signer
	// Dir holds sshd_config, keys, the pid file and the log.
	Dir string

	mu      sync.Mutex
	cmd     *exec.Cmd
	own     bool
	keysDir string // world-readable: sshd reads authorized_keys as the remote user
	opts    Options
}

// New starts a server for a test and stops it when the test ends. It fails the test if sshd
// cannot start: tests that need sshd must not skip.
func New(tb testing.TB, opts Options) *Server {
	tb.Helper()
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	s, err := Start(context.Background(), opts)
	if err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Logf("sshtest: close: %v", err)
		}
	})
	return s
}

// Start launches sshd. Call Close to stop it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.User == "" {
		opts.User = DefaultUser
	}
	own := false
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "sshtest-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		opts.Dir, own = d, true
	}
	if err := os.Chmod(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod dir: %w", err)
	}
	if _, err := os.Stat(SSHDPath); err != nil {
		return nil, fmt.Errorf("%s not found (install openssh-server): %w", SSHDPath, err)
	}
	home, err := EnsureUser(ctx, opts.User)
	if err != nil {
		return nil, err
	}
	if opts.Shell != "" {
		if err := setShell(ctx, opts.User, opts.Shell); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, fmt.Errorf("privsep dir: %w", err)
	}

	s := &Server{User: opts.User, Home: home, Dir: opts.Dir, own: own, opts: opts}
	var clientPub ssh.PublicKey
	s.PrivateKeyPEM, clientPub, s.Signer, err = newKey()
	if err != nil {
		return nil, err
	}
	hostKeyLines, err := s.writeHostKeys(false)
	if err != nil {
		return nil, err
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
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s.Host, s.Port = "127.0.0.1", port
	s.Addr = net.JoinHostPort(s.Host, strconv.Itoa(port))
	if len(opts.TrustedUserCAKeys) > 0 {
		var b []byte
		for _, k := range opts.TrustedUserCAKeys {
			b = append(b, ssh.MarshalAuthorizedKey(k)...)
		}
		if err := os.WriteFile(filepath.Join(opts.Dir, "user_ca.pub"), b, 0o644); err != nil {
			return nil, fmt.Errorf("write user CA: %w", err)
		}
		hostKeyLines += fmt.Sprintf("TrustedUserCAKeys %s/user_ca.pub\n", opts.Dir)
	}
	// As Debian ships it: several host keys, PAM, the external sftp-server.
	sftpLine := "Subsystem sftp /usr/lib/openssh/sftp-server\n"
	if opts.NoSFTP {
		sftpLine = ""
	}
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
%[6]sPidFile %[2]s/sshd.pid
AuthorizedKeysFile %[5]s/authorized_keys
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM yes
AllowUsers %[3]s
PrintMotd no
LogLevel %[8]s
%[7]s%[4]s
`, port, opts.Dir, opts.User, opts.ExtraConfig, s.keysDir, hostKeyLines, sftpLine, cmp.Or(opts.LogLevel, "VERBOSE"))
	if err := os.WriteFile(filepath.Join(opts.Dir, "sshd_config"), []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("write sshd_config: %w", err)
	}
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// AuthorizeKey adds another public key to the server's authorized_keys.
func (s *Server) AuthorizeKey(pub ssh.PublicKey) error {
	f, err := os.OpenFile(filepath.Join(s.keysDir, "authorized_keys"), os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open authorized_keys: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(ssh.MarshalAuthorizedKey(pub)); err != nil {
		return fmt.Errorf("append authorized_keys: %w", err)
	}
	return nil
}

// Restart (re)starts sshd on the same port with the same keys. A running sshd is killed first,
// together with every per-connection process it forked, so clients see their connections drop.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	var lastErr error
	for attempt := 0; attempt < 50; attempt++ {
		cmd := exec.Command(SSHDPath, "-D", "-f", filepath.Join(s.Dir, "sshd_config"), "-E", filepath.Join(s.Dir, "sshd.log"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start sshd: %w", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if err := waitBanner(ctx, s.Addr, exited); err == nil {
			s.cmd = cmd
			return nil
		} else {
			lastErr = fmt.Errorf("%w: %s %s", err, stderr.String(), s.tailLog())
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		time.Sleep(100 * time.Millisecond) // the port may still be held by the previous instance
	}
	return fmt.Errorf("sshd did not come up on %s: %w", s.Addr, lastErr)
}

// Kill stops sshd and all its children at once (SIGKILL to the process group).
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	// Per-connection sshd processes call setsid and leave the group, and they fork (privilege
	// separation, the user's session) at any time: freeze the listener and then every
	// descendant, pass after pass until a pass finds no new one (a frozen process cannot fork),
	// and only then kill them all. A child that escaped would keep its connection's socket open.
	frozen := map[int]bool{pid: true}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for pass := 0; pass < 100; pass++ {
		fresh := 0
		for _, child := range descendants(pid) {
			if !frozen[child] {
				frozen[child] = true
				fresh++
				_ = syscall.Kill(child, syscall.SIGSTOP)
			}
		}
		if fresh == 0 {
			break
		}
	}
	for p := range frozen {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	s.cmd = nil
}

// Close stops sshd and removes the directory if Start created it.
func (s *Server) Close() error {
	s.Kill()
	err := os.RemoveAll(s.keysDir)
	if s.own {
		err = errors.Join(err, os.RemoveAll(s.Dir))
	}
	return err
}

// Log returns sshd's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "sshd.log"))
	return string(b)
}

// WaitLog waits until sshd's log matches re (sshd logs asynchronously to its clients: the
// pre-authentication process's lines pass through its monitor), failing tb after 15 seconds.
func (s *Server) WaitLog(tb testing.TB, re *regexp.Regexp) {
	tb.Helper()
	for deadline := time.Now().Add(15 * time.Second); !re.MatchString(s.Log()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("sshd log has no line matching %q:\n%s", re, s.tailLog())
		}
	}
}

func (s *Server) tailLog() string {
	l := s.Log()
	if len(l) > 2000 {
		l = l[len(l)-2000:]
	}
	return l
}

// ClientConfig returns an x/crypto/ssh client config that authenticates with the test key and
// verifies the host key strictly (offering only HostKey's algorithm, so the server presents it).
func (s *Server) ClientConfig() *ssh.ClientConfig {
	return &ssh.ClientConfig{
		User:              s.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(s.Signer)},
		HostKeyCallback:   ssh.FixedHostKey(s.HostKey),
		HostKeyAlgorithms: []string{s.HostKey.Type()},
		Timeout:           10 * time.Second,
	}
}

// SFTP dials the server with ClientConfig and returns an SFTP client on that connection; both
// are closed when the test ends.
func (s *Server) SFTP(tb testing.TB) *sftp.Client {
	tb.Helper()
	conn, err := ssh.Dial("tcp", s.Addr, s.ClientConfig())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	c, err := sftp.NewClient(conn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// AuthorizedHostKey returns the host key in authorized_keys form ("ssh-ed25519 AAAA...").
func (s *Server) AuthorizedHostKey() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.HostKey)))
}

// MkTemp creates a fresh directory owned by the remote user inside its home and removes it when
// the test ends. Tests keep their remote files there so they cannot collide.
func (s *Server) MkTemp(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp(s.Home, "t-")
	if err != nil {
		tb.Fatalf("sshtest: remote temp dir: %v", err)
	}
	if err := chownToUser(dir, s.User); err != nil {
		tb.Fatalf("sshtest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func chownToUser(path, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("lookup %s: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

var userMu sync.Mutex

// EnsureUser creates the local account name (shell /bin/sh, no password, key login allowed)
// if it does not exist and returns its home directory.
func EnsureUser(ctx context.Context, name string) (string, error) {
	userMu.Lock()
	defer userMu.Unlock()
	if u, err := user.Lookup(name); err == nil {
		return u.HomeDir, nil
	}
	if out, err := exec.CommandContext(ctx, "useradd", "--create-home", "--shell", "/bin/sh", name).CombinedOutput(); err != nil {
		// another test binary may have created it concurrently
		if u, lerr := user.Lookup(name); lerr == nil {
			return u.HomeDir, nil
		}
		return "", fmt.Errorf("useradd %s (tests must run as root): %w: %s", name, err, out)
	}
	// A "!" password marks the account locked and sshd without PAM refuses it; "*" only
	// disables password login.
	if out, err := exec.CommandContext(ctx, "usermod", "-p", "*", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("usermod %s: %w: %s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return "", fmt.Errorf("lookup %s: %w", name, err)
	}
	return u.HomeDir, nil
}

// setShell makes shell the login shell of the local account name.
func setShell(ctx context.Context, name, shell string) error {
	userMu.Lock()
	defer userMu.Unlock()
	if _, err := os.Stat(shell); err != nil {
		return fmt.Errorf("login shell %s (scripts/install-deps installs it): %w", shell, err)
	}
	if out, err := exec.CommandContext(ctx, "usermod", "--shell", shell, name).CombinedOutput(); err != nil {
		return fmt.Errorf("usermod --shell %s %s: %w: %s", shell, name, err, out)
	}
	return nil
}

// SetPassword gives the local account name (see EnsureUser) the password pw, for servers that
// take passwords (PasswordAuthentication yes, e.g. in a Match block of ExtraConfig).
func SetPassword(ctx context.Context, name, pw string) error {
	cmd := exec.CommandContext(ctx, "chpasswd")
	cmd.Stdin = strings.NewReader(name + ":" + pw + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chpasswd %s: %w: %s", name, err, out)
	}
	return nil
}

// newKey makes an Ed25519 key.
func newKey() (pemBytes []byte, pub ssh.PublicKey, signer ssh.Signer, err error) {
	priv, err := NewPrivateKey("ed25519", 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("marshal key: %w", err)
	}
	signer, err = ssh.NewSignerFromSigner(priv)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("signer: %w", err)
	}
	return pem.EncodeToMemory(block), signer.PublicKey(), signer, nil
}

// ConnectionPIDs returns the ids of the per-connection sshd processes, the listener's children:
// one for each client connection, authenticated or not.
func (s *Server) ConnectionPIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	var out []int
	for p, pp := range parents() {
		if pp == s.cmd.Process.Pid {
			out = append(out, p)
		}
	}
	return out
}

// KillConnection kills per-connection process pid (from ConnectionPIDs) and every process below
// it (its sessions' shells and commands) at once, as a crash of that connection's sshd would: the
// client sees its connection drop while the listener and other connections stay up.
func (s *Server) KillConnection(pid int) {
	for p := range freeze(pid) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// StopConnection freezes (SIGSTOP) per-connection process pid and every process below it: the
// client's requests on that connection go unanswered, its writes still succeed, until
// KillConnection ends it.
func (s *Server) StopConnection(pid int) { freeze(pid) }

// freeze stops pid and every process below it and returns them.
func freeze(pid int) map[int]bool {
	frozen := map[int]bool{pid: true}
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for pass := 0; pass < 100; pass++ { // as in Kill: a frozen process cannot fork
		fresh := 0
		for _, child := range descendants(pid) {
			if !frozen[child] {
				frozen[child] = true
				fresh++
				_ = syscall.Kill(child, syscall.SIGSTOP)
			}
		}
		if fresh == 0 {
			break
		}
	}
	return frozen
}

// descendants lists every process below pid, read from /proc.
func descendants(pid int) []int {
	parent := parents()
	var out []int
	var walk func(int)
	walk = func(root int) {
		for p, pp := range parent {
			if pp == root {
				out = append(out, p)
				walk(p)
			}
		}
	}
	walk(pid)
	return out
}

// parents maps every process id to its parent's, read from /proc.
func parents() map[int]int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces and parentheses
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[p] = pp
	}
	return parent
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitBanner(ctx context.Context, addr string, exited <-chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("sshd exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 4)
			_, rerr := c.Read(buf)
			c.Close()
			if rerr == nil && string(buf) == "SSH-" {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("timed out waiting for the SSH banner")
}
