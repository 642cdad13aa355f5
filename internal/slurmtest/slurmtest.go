// Package slurmtest starts a real one-node Slurm cluster on loopback for tests and benchmarks,
// from Debian's packages (munge, slurmctld, slurmd, slurm-client): a munged with its own key and
// socket, a slurmctld and a slurmd, all configured in a temporary directory whose slurm.conf is
// passed with SLURM_CONF (and to a test sshd's sessions with SetEnv, see SSHDConfig). Jobs run as
// whichever local user submits them. Every daemon is stopped by its PID. It fails the test if
// the packages are missing: tests that need Slurm must not skip (.ci/run installs them).
//
// The configuration avoids everything a container lacks (cgroups, systemd, DNS):
// SlurmctldHost=localhost, CommunicationParameters=NoCtldInAddrAny,NoInAddrAny,
// ProctrackType=proctrack/linuxproc, TaskPlugin=task/none and batch_sched_delay=0, so the node
// is idle about a second after start and a job runs within a second of its submission.
package slurmtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binaries the cluster needs, as Debian installs them.
const (
	MungedPath    = "/usr/sbin/munged"
	SlurmctldPath = "/usr/sbin/slurmctld"
	SlurmdPath    = "/usr/sbin/slurmd"
	SlurmdbdPath  = "/usr/sbin/slurmdbd"
	MariadbdPath  = "/usr/sbin/mariadbd"
	// MariadbInstallPath initialises a MariaDB data directory.
	MariadbInstallPath = "/usr/bin/mariadb-install-db"
	// BinDir holds the client commands (sbatch, squeue, scontrol, scancel, sacct).
	BinDir = "/usr/bin"
)

// Packages are the Debian packages that provide the cluster.
var Packages = []string{"munge", "slurmctld", "slurmd", "slurm-client"}

// AccountingPackages are the Debian packages Options.Accounting needs besides Packages.
var AccountingPackages = []string{"slurmdbd", "mariadb-server"}

// Partition is the cluster's only (and default) partition.
const Partition = "debug"

// Node is the cluster's only node.
const Node = "n1"

// Options tunes a cluster. The zero value gives the default one-node cluster.
type Options struct {
	// Dir holds the cluster's files; a new temporary directory when empty.
	Dir string
	// ExtraConfig is appended to slurm.conf verbatim.
	ExtraConfig string
	// Accounting adds slurmdbd on a throwaway MariaDB (Debian's slurmdbd and mariadb-server)
	// and job accounting (jobacct_gather/linux), so sacct answers.
	Accounting bool
}

// Cluster is a running one-node Slurm cluster.
type Cluster struct {
	// Dir holds slurm.conf, the munge key and socket, state, spool and logs.
	Dir string
	// Conf is the path of slurm.conf; clients find the cluster with SLURM_CONF=Conf.
	Conf string
	// Name is the cluster's ClusterName.
	Name string
	// CPUs is the node's CPU count.
	CPUs int

	own  bool
	mu   sync.Mutex
	proc map[string]*daemon // "munged", "slurmctld", "slurmd"
}

// daemon is one running daemon process.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// New starts a cluster for a test and stops it when the test ends. It fails the test if the
// cluster cannot start.
func New(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	// Not tb.TempDir: its parent is private to root, and job users must reach slurm.conf.
	c, err := Start(context.Background(), opts)
	if err != nil {
		tb.Fatalf("slurmtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Logf("slurmtest: close: %v", err)
		}
	})
	return c
}

// Installed reports whether the Debian packages are installed, naming what is missing.
func Installed() error {
	var missing []string
	for _, p := range []string{MungedPath, SlurmctldPath, SlurmdPath, filepath.Join(BinDir, "sbatch")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Slurm is not installed (%s missing): apt-get install %s", strings.Join(missing, ", "), strings.Join(Packages, " "))
	}
	return nil
}

// Start launches munged, slurmctld and slurmd and waits until the node is idle. Call Close to
// stop them.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := Installed(); err != nil {
		return nil, err
	}
	if opts.Accounting {
		for _, p := range []string{SlurmdbdPath, MariadbdPath, MariadbInstallPath} {
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("Slurm accounting is not installed (%s missing): apt-get install %s", p, strings.Join(AccountingPackages, " "))
			}
		}
	}
	own := false
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "slurmtest-")
		if err != nil {
			return nil, fmt.Errorf("temp dir: %w", err)
		}
		opts.Dir, own = d, true
	}
	c := &Cluster{Dir: opts.Dir, Conf: filepath.Join(opts.Dir, "slurm.conf"), own: own, proc: map[string]*daemon{},
		Name: "t" + strings.ToLower(rand.Text()[:8]), CPUs: runtime.NumCPU()}
	// Every directory on the way must be reachable by the job user: sbatch reads slurm.conf
	// and talks to munged's socket as that user.
	if err := os.Chmod(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("chmod dir: %w", err)
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"munge", 0o700}, {"sock", 0o755}, {"state", 0o700}, {"spool", 0o755}, {"log", 0o755}, {"db", 0o700}} {
		if err := os.Mkdir(filepath.Join(c.Dir, d.name), d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("mkdir %s: %w", d.name, err)
		}
	}
	key := make([]byte, 1024)
	_, _ = rand.Read(key)
	if err := os.WriteFile(filepath.Join(c.Dir, "munge", "munge.key"), key, 0o400); err != nil {
		return nil, fmt.Errorf("munge key: %w", err)
	}
	ctldPort, err := freePort()
	if err != nil {
		return nil, err
	}
	dPort, err := freePort()
	if err != nil {
		return nil, err
	}
	acct := "JobAcctGatherType=jobacct_gather/none\n"
	var dbPort, dbdPort int
	if opts.Accounting {
		if dbPort, err = freePort(); err != nil {
			return nil, err
		}
		if dbdPort, err = freePort(); err != nil {
			return nil, err
		}
		acct = fmt.Sprintf("JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=task=1\n"+
			"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort=%d\n"+
			// The munge socket for slurmdbd connections (AuthInfo's is not used for them).
			"AccountingStoragePass=%s\n", dbdPort, filepath.Join(c.Dir, "sock", "munge.socket"))
	}
	conf := fmt.Sprintf(`ClusterName=%[1]s
SlurmctldHost=localhost
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[4]s/sock/munge.socket
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
%[9]sMpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MessageTimeout=3
StateSaveLocation=%[4]s/state
SlurmdSpoolDir=%[4]s/spool
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd.pid
SlurmctldLogFile=%[4]s/log/slurmctld.log
SlurmdLogFile=%[4]s/log/slurmd.log
ReturnToService=2
MinJobAge=300
MaxArraySize=1001
NodeName=%[5]s NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=%[6]d RealMemory=1000 State=UNKNOWN
PartitionName=%[7]s Nodes=%[5]s Default=YES MaxTime=INFINITE State=UP
%[8]s
`, c.Name, ctldPort, dPort, c.Dir, Node, c.CPUs, Partition, opts.ExtraConfig, acct)
	if err := os.WriteFile(c.Conf, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("write slurm.conf: %w", err)
	}
	start := func() error {
		if err := c.startDaemon("munged", MungedPath, "-F", "-f",
			"--socket="+filepath.Join(c.Dir, "sock", "munge.socket"),
			"--key-file="+filepath.Join(c.Dir, "munge", "munge.key"),
			"--pid-file="+filepath.Join(c.Dir, "munge", "munged.pid"),
			"--log-file="+filepath.Join(c.Dir, "log", "munged.log"),
			"--seed-file="+filepath.Join(c.Dir, "munge", "munged.seed")); err != nil {
			return err
		}
		if err := waitFile(ctx, filepath.Join(c.Dir, "sock", "munge.socket"), c.proc["munged"]); err != nil {
			return fmt.Errorf("munged: %w", err)
		}
		if opts.Accounting {
			if err := c.startAccounting(ctx, dbPort, dbdPort); err != nil {
				return err
			}
		}
		if err := c.StartController(ctx); err != nil {
			return err
		}
		if err := c.startDaemon("slurmd", SlurmdPath, "-D", "-N", Node); err != nil {
			return err
		}
		return c.WaitIdle(ctx)
	}
	if err := start(); err != nil {
		cerr := c.Close()
		return nil, errors.Join(err, cerr)
	}
	return c, nil
}

// Env returns the environment a Slurm client needs to reach the cluster ("SLURM_CONF=...").
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// SSHDConfig returns sshd_config lines that give every session the cluster's environment
// (sshtest.Options.ExtraConfig), as a login node's /etc/profile would.
func (c *Cluster) SSHDConfig() string { return "SetEnv SLURM_CONF=" + c.Conf + "\n" }

// Command runs a Slurm client command (looked up in BinDir) as the calling user against the
// cluster and returns its combined output.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(BinDir, name), args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// WaitIdle waits until the node reports idle (or mixed/allocated: it is up and schedulable).
func (c *Cluster) WaitIdle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last string
	for {
		out, err := c.Command(ctx, "sinfo", "-h", "-n", Node, "-o", "%T")
		st := strings.TrimSpace(out)
		if err == nil && (st == "idle" || st == "mixed" || st == "allocated") {
			return nil
		}
		last = st
		if err != nil {
			last = err.Error()
		}
		for name, d := range c.daemons() {
			select {
			case <-d.done:
				return fmt.Errorf("%s exited: %s", name, c.logTail(name))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node not idle (last: %s): %w; slurmctld: %s; slurmd: %s", last, ctx.Err(), c.logTail("slurmctld"), c.logTail("slurmd"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StartController (re)starts slurmctld, keeping its saved state, and waits until it answers.
func (c *Cluster) StartController(ctx context.Context) error {
	return c.startDaemonArgs(ctx, "-D", "-i")
}

// startDaemonArgs starts slurmctld with args and waits until it answers.
func (c *Cluster) startDaemonArgs(ctx context.Context, args ...string) error {
	if err := c.startDaemon("slurmctld", SlurmctldPath, args...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := c.Command(ctx, "scontrol", "ping"); err == nil {
			return nil
		}
		select {
		case <-c.proc["slurmctld"].done:
			return fmt.Errorf("slurmctld exited: %s", c.logTail("slurmctld"))
		case <-ctx.Done():
			return fmt.Errorf("slurmctld does not answer: %w: %s", ctx.Err(), c.logTail("slurmctld"))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ForgetJobs restarts slurmctld without its saved state, as if every job had aged out of the
// controller (MinJobAge); with Options.Accounting the jobs remain in sacct. Job ids start again
// from 1.
func (c *Cluster) ForgetJobs(ctx context.Context) error {
	if err := c.stopDaemon("slurmctld"); err != nil {
		return err
	}
	if err := c.startDaemonArgs(ctx, "-D", "-c", "-i"); err != nil {
		return err
	}
	return c.WaitIdle(ctx)
}

// StopController stops slurmctld (by its PID), as an outage would: clients then fail to reach
// the controller until StartController.
func (c *Cluster) StopController() error { return c.stopDaemon("slurmctld") }

// Close cancels every job, stops slurmd, slurmctld and munged by their PIDs and removes the
// directory if Start created it.
func (c *Cluster) Close() error {
	var errs []error
	if c.running("slurmctld") {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Jobs' slurmstepd processes outlive slurmd: end them through the scheduler first.
		if _, err := c.Command(ctx, "scancel", "--full", "--state=RUNNING"); err == nil {
			for ctx.Err() == nil {
				out, err := c.Command(ctx, "squeue", "-h", "-t", "RUNNING,COMPLETING", "-o", "%i")
				if err != nil || strings.TrimSpace(out) == "" {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		cancel()
	}
	for _, name := range []string{"slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"} {
		if err := c.stopDaemon(name); err != nil {
			errs = append(errs, err)
		}
	}
	if c.own {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}

// Log returns a daemon's log file ("slurmctld", "slurmd", "munged").
func (c *Cluster) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "log", name+".log"))
	o, _ := os.ReadFile(filepath.Join(c.Dir, "log", name+".out"))
	return string(b) + string(o)
}

func (c *Cluster) logTail(name string) string {
	l := c.Log(name)
	if len(l) > 2000 {
		l = l[len(l)-2000:]
	}
	return l
}

func (c *Cluster) daemons() map[string]*daemon {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]*daemon, len(c.proc))
	for k, v := range c.proc {
		m[k] = v
	}
	return m
}

func (c *Cluster) running(name string) bool {
	c.mu.Lock()
	d := c.proc[name]
	c.mu.Unlock()
	if d == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// startDaemon runs a daemon in the foreground with the cluster's environment, output to
// log/<name>.out.
func (c *Cluster) startDaemon(name, path string, args ...string) error {
	if c.running(name) {
		return fmt.Errorf("%s is already running", name)
	}
	out, err := os.OpenFile(filepath.Join(c.Dir, "log", name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(d.done)
	}()
	c.mu.Lock()
	c.proc[name] = d
	c.mu.Unlock()
	return nil
}

// stopDaemon sends SIGTERM to a daemon's PID, then SIGKILL to its process group if it has not
// exited within 10 s.
func (c *Cluster) stopDaemon(name string) error {
	c.mu.Lock()
	d := c.proc[name]
	delete(c.proc, name)
	c.mu.Unlock()
	if d == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for 10s: killed", name, d.cmd.Process.Pid)
}

func waitFile(ctx context.Context, path string, d *daemon) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-d.done:
			return errors.New("exited before creating " + path)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startAccounting starts a throwaway MariaDB on a free loopback port and slurmdbd on it.
func (c *Cluster) startAccounting(ctx context.Context, dbPort, dbdPort int) error {
	db := filepath.Join(c.Dir, "db")
	inst := exec.CommandContext(ctx, MariadbInstallPath, "--no-defaults", "--datadir="+filepath.Join(db, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--user=root")
	if out, err := inst.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %w: %s", err, out)
	}
	sock := filepath.Join(db, "mysqld.sock")
	if err := c.startDaemon("mariadbd", MariadbdPath, "--no-defaults", "--datadir="+filepath.Join(db, "data"), "--socket="+sock,
		"--port="+strconv.Itoa(dbPort), "--bind-address=127.0.0.1", "--user=root", "--pid-file="+filepath.Join(db, "mysqld.pid"),
		"--log-error="+filepath.Join(c.Dir, "log", "mariadbd.log")); err != nil {
		return err
	}
	if err := waitFile(ctx, sock, c.proc["mariadbd"]); err != nil {
		return fmt.Errorf("mariadbd: %w: %s", err, c.logTail("mariadbd"))
	}
	pass := strings.ToLower(rand.Text()[:16])
	sql := fmt.Sprintf("CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '%[1]s'; CREATE USER 'slurm'@'localhost' IDENTIFIED BY '%[1]s'; "+
		"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';", pass)
	if out, err := exec.CommandContext(ctx, "mariadb", "--no-defaults", "-S", sock, "-uroot", "-e", sql).CombinedOutput(); err != nil {
		return fmt.Errorf("create the accounting database user: %w: %s", err, out)
	}
	conf := fmt.Sprintf(`AuthType=auth/munge
AuthInfo=socket=%[1]s/sock/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=%[2]d
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=%[3]d
StorageUser=slurm
StoragePass=%[4]s
StorageLoc=slurm_acct_db
PidFile=%[1]s/slurmdbd.pid
LogFile=%[1]s/log/slurmdbd.log
`, c.Dir, dbdPort, dbPort, pass)
	// slurmdbd refuses a slurmdbd.conf others can read; it finds it next to SLURM_CONF.
	if err := os.WriteFile(filepath.Join(c.Dir, "slurmdbd.conf"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("write slurmdbd.conf: %w", err)
	}
	if err := c.startDaemon("slurmdbd", SlurmdbdPath, "-D"); err != nil {
		return err
	}
	// Ready once it accepts connections on its port.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(dbdPort)), time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-c.proc["slurmdbd"].done:
			return fmt.Errorf("slurmdbd exited: %s", c.logTail("slurmdbd"))
		case <-wctx.Done():
			return fmt.Errorf("slurmdbd does not listen: %w: %s", wctx.Err(), c.logTail("slurmdbd"))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
