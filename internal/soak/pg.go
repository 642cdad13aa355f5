package soak

import (
	"bytes"
	"context"
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
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCluster is a throwaway PostgreSQL cluster like internal/pgtest's, which can also be stopped
// and started again on the same data directory and port (the soak's database fault). pgtest
// cannot restart, and this package must not change it.
type pgCluster struct {
	dir, bin string
	port     int
	cred     *syscall.SysProcAttr

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *bytes.Buffer
}

func startPG(ctx context.Context) (*pgCluster, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return a > b
	})
	bin := ""
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			bin = d
			break
		}
	}
	if bin == "" {
		return nil, errors.New("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/initdb): apt-get install postgresql")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("account postgres (installed with postgresql): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c := &pgCluster{bin: bin, cred: &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Setpgid: true}}
	if c.dir, err = os.MkdirTemp("", "soak-pg-"); err != nil {
		return nil, err
	}
	if err := os.Chown(c.dir, uid, gid); err != nil {
		c.remove()
		return nil, err
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", filepath.Join(c.dir, "data"), "-U", "postgres",
		"--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr, initdb.Dir = c.cred, c.dir
	if out, err := initdb.CombinedOutput(); err != nil {
		c.remove()
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.remove()
		return nil, err
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := c.start(ctx); err != nil {
		c.remove()
		return nil, err
	}
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		c.Close()
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE soak"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *pgCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// start runs postgres on the cluster's data directory and port and waits until it answers.
func (c *pgCluster) start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", filepath.Join(c.dir, "data"), "-p", strconv.Itoa(c.port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+c.dir,
			"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=64MB")
		cmd.SysProcAttr, cmd.Dir = c.cred, c.dir
		log := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start postgres: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		if last = waitPG(ctx, c.url("postgres"), done); last == nil {
			c.cmd, c.done, c.log = cmd, done, log
			return nil
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		last = fmt.Errorf("%w: %s", last, log.String())
		time.Sleep(200 * time.Millisecond) // the port or the old postmaster's pid file may linger
	}
	return fmt.Errorf("postgres did not start: %w", last)
}

func waitPG(ctx context.Context, url string, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("postgres exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, url)
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("timed out waiting for postgres")
}

// stop ends postgres with a fast shutdown (SIGINT: open sessions are disconnected), as an
// operator's restart does.
func (c *pgCluster) stop() {
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

// Close stops the cluster and removes its files.
func (c *pgCluster) Close() {
	c.stop()
	c.remove()
}

func (c *pgCluster) remove() { _ = os.RemoveAll(c.dir) }
