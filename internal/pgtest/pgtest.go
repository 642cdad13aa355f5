// Package pgtest starts a real, throwaway PostgreSQL cluster on a free loopback port for tests:
// initdb into a temporary directory as the unprivileged "postgres" account (Debian's postgresql
// package creates it), then one fresh database per test. It fails the test if PostgreSQL is not
// installed: tests that need it must not skip (CI installs Debian's postgresql).
package pgtest

import (
	"bytes"
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

// Cluster is a running PostgreSQL server owned by a test.
type Cluster struct {
	// Dir holds the data directory, the socket and the log.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int

	cmd  *exec.Cmd
	mu   sync.Mutex
	seq  int
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

// Start runs initdb and postgres. Call Stop to end the cluster and remove its files.
func Start(ctx context.Context) (*Cluster, error) {
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
	cred := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Setpgid: true}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("chown %s: %w", dir, err)
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr = cred
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	c := &Cluster{Dir: dir, done: make(chan struct{})}
	for attempt := 0; attempt < 5; attempt++ {
		if c.Port, err = freePort(); err != nil {
			break
		}
		c.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(c.Port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=200", "-c", "shared_buffers=64MB")
		c.cmd.SysProcAttr = cred
		c.cmd.Dir = dir
		var logBuf bytes.Buffer
		c.cmd.Stdout, c.cmd.Stderr = &logBuf, &logBuf
		if err = c.cmd.Start(); err != nil {
			break
		}
		exited := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(exited) }()
		if err = c.waitReady(ctx, exited); err == nil {
			c.done = exited
			return c, nil
		}
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		err = fmt.Errorf("%w: %s", err, logBuf.String())
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("postgres did not start: %w", err)
}

func (c *Cluster) waitReady(ctx context.Context, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("postgres exited")
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, c.dsn("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("timed out waiting for postgres to accept connections")
}

func (c *Cluster) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// NewDatabase creates an empty database for tb and returns its connection URL.
func (c *Cluster) NewDatabase(tb testing.TB) string {
	tb.Helper()
	c.mu.Lock()
	c.seq++
	name := fmt.Sprintf("t%d_%s", c.seq, randomSuffix())
	c.mu.Unlock()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	return c.dsn(name)
}

// Stop ends the cluster (fast shutdown) and removes its files.
func (c *Cluster) Stop() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
	os.RemoveAll(c.Dir)
}

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
