// Package pgtest starts a real, throwaway PostgreSQL cluster on a free loopback port for tests:
// initdb into a temporary directory as the unprivileged "postgres" account (Debian's postgresql
// package creates it), then one fresh database per test. It fails the test if PostgreSQL is not
// installed: tests that need it must not skip (CI installs Debian's postgresql).
//
// A cluster can also be halted and resumed on the same data directory and port (a database
// restart, as the chaos soak injects it), and can seed a streaming replica that is later
// promoted (replica.go).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Account is the operating-system user the cluster runs as (PostgreSQL refuses to run as root).
const Account = "postgres"

// Options changes how a cluster runs. The zero value is tuned for fast tests.
type Options struct {
	// Durable keeps synchronous_commit on, so that a commit is on disk (and, with a synchronous
	// standby, replicated) before it is acknowledged. Tests default to off, for speed.
	Durable bool
	// Settings are extra server settings as name=value, passed as "-c" after the defaults (so
	// they override them).
	Settings []string
}

// Cluster is a running PostgreSQL server owned by a test.
type Cluster struct {
	// Dir holds the data directory, the socket and the log (postgres.log).
	Dir string
	// Port is the TCP port on 127.0.0.1; it stays the same across Halt and Resume.
	Port int

	bin  string
	cred *syscall.SysProcAttr
	opts Options

	mu   sync.Mutex
	seq  int
	cmd  *exec.Cmd
	done chan struct{}
}

// New starts a cluster for tb and stops it when tb ends.
func New(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := Start(context.Background())
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// Start runs initdb and postgres with the default Options. Call Stop to end the cluster and
// remove its files.
func Start(ctx context.Context) (*Cluster, error) { return StartWith(ctx, Options{}) }

// StartWith runs initdb and postgres with o. Call Stop to end the cluster and remove its files.
func StartWith(ctx context.Context, o Options) (*Cluster, error) {
	c, err := newCluster(o)
	if err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, filepath.Join(c.bin, "initdb"), "-D", c.dataDir(), "-U", Account, "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr = c.cred
	initdb.Dir = c.Dir
	if out, err := initdb.CombinedOutput(); err != nil {
		c.remove()
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := c.startOnFreePort(ctx); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// newCluster finds the programs and the account and makes the cluster's directory, owned by
// the account; nothing runs yet.
func newCluster(o Options) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	u, err := user.Lookup(Account)
	if err != nil {
		return nil, fmt.Errorf("account %s (installed with postgresql): %w", Account, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c := &Cluster{bin: bin, opts: o, done: make(chan struct{}),
		cred: &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Setpgid: true}}
	if c.Dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	if err := os.Chown(c.Dir, uid, gid); err != nil {
		c.remove()
		return nil, fmt.Errorf("chown %s: %w", c.Dir, err)
	}
	return c, nil
}

// binDir finds the newest installed PostgreSQL's programs.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a > b
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb): apt-get install postgresql")
}

func (c *Cluster) dataDir() string { return filepath.Join(c.Dir, "data") }

// LogPath is the server's log file; it is appended to across restarts.
func (c *Cluster) LogPath() string { return filepath.Join(c.Dir, "postgres.log") }

// startOnFreePort picks a free port and starts the server on it, trying another port if the
// one picked was taken meanwhile.
func (c *Cluster) startOnFreePort(ctx context.Context) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if c.Port, err = freePort(); err != nil {
			return err
		}
		if err = c.run(ctx); err == nil {
			return nil
		}
	}
	return fmt.Errorf("postgres did not start: %w", err)
}

// run starts postgres on the data directory and c.Port and waits until it accepts connections
// (a standby: read-only connections).
func (c *Cluster) run(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	commit := "off"
	if c.opts.Durable {
		commit = "on"
	}
	args := []string{"-D", c.dataDir(), "-p", strconv.Itoa(c.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + c.Dir,
		"-c", "fsync=off", "-c", "synchronous_commit=" + commit, "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=64MB"}
	for _, s := range c.opts.Settings {
		args = append(args, "-c", s)
	}
	logf, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("postgres log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), args...)
	cmd.SysProcAttr = c.cred
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := c.waitReady(ctx, exited); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%w: %s", err, tail(c.LogPath(), 2000))
	}
	c.cmd, c.done = cmd, exited
	return nil
}

func (c *Cluster) waitReady(ctx context.Context, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("postgres exited")
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres: %w", ctx.Err())
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, c.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("timed out waiting for postgres to accept connections")
}

// URL is the connection URL of database db on this cluster.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Account, c.Port, db)
}

// CreateDatabase creates an empty database called name and returns its connection URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return c.URL(name), nil
}

// NewDatabase creates an empty database for tb and returns its connection URL.
func (c *Cluster) NewDatabase(tb testing.TB) string {
	tb.Helper()
	c.mu.Lock()
	c.seq++
	name := fmt.Sprintf("t%d_%s", c.seq, randomSuffix())
	c.mu.Unlock()
	url, err := c.CreateDatabase(context.Background(), name)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return url
}

// Halt stops the server with a fast shutdown (open sessions are disconnected, everything
// committed is written and sent to connected standbys), as an operator's restart does, and
// keeps its files. It waits up to 15 s, then kills the server. Halting a halted cluster does
// nothing.
func (c *Cluster) Halt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
	c.cmd = nil
}

// Resume starts a halted cluster again on the same data directory and port. The port can stay
// busy for a moment after a halt, and the old postmaster's pid file can linger, so it retries
// for a while.
func (c *Cluster) Resume(ctx context.Context) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = c.run(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("postgres did not start again: %w", err)
}

// Restart halts the cluster and resumes it.
func (c *Cluster) Restart(ctx context.Context) error {
	c.Halt()
	return c.Resume(ctx)
}

// Running reports whether the server is up (not halted or stopped).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}

// Stop ends the cluster (fast shutdown) and removes its files. It may be called more than once.
func (c *Cluster) Stop() {
	c.Halt()
	c.remove()
}

func (c *Cluster) remove() { _ = os.RemoveAll(c.Dir) }

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail is the last n bytes of the file at path, for error messages.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
