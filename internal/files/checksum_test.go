package files

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/digest"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// execLog is a test sshd whose sessions find every program in /usr/bin through a directory of
// shims on their PATH: each shim appends its name and process id to a log and execs the real
// program in the same process, so the log lists the programs a command ran (shell builtins are
// none) and the processes they ran in.
type execLog struct {
	srv *sshtest.Server
	log string
}

func newExecLog(t *testing.T) *execLog {
	shims, err := os.MkdirTemp("", "sshapi-shims-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shims) })
	if err := os.Chmod(shims, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(shims, "log")
	if err := os.WriteFile(log, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(log, 0o666); err != nil { // whatever the umask: the remote user appends
		t.Fatal(err)
	}
	shim := filepath.Join(shims, ".shim")
	body := "#!/bin/sh\nn=${0##*/}\necho \"$n $$\" >>" + log + "\nexec /usr/bin/\"$n\" \"$@\"\n"
	if err := os.WriteFile(shim, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	progs, err := os.ReadDir("/usr/bin")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		if err := os.Symlink(shim, filepath.Join(shims, p.Name())); err != nil {
			t.Fatal(err)
		}
	}
	srv := sshtest.New(t, sshtest.Options{ExtraConfig: "SetEnv PATH=" + shims})
	return &execLog{srv: srv, log: log}
}

// started returns the programs run since the last call, in order, and how many processes they
// ran in, and clears the log.
func (l *execLog) started(t *testing.T) (progs []string, procs int) {
	t.Helper()
	b, err := os.ReadFile(l.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(l.log, 0); err != nil {
		t.Fatal(err)
	}
	pids := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		name, pid, _ := strings.Cut(strings.TrimSpace(line), " ")
		progs = append(progs, name)
		pids[pid] = true
	}
	return progs, len(pids)
}

// commandSessions counts the command (exec) sessions sshd has logged so far (LogLevel VERBOSE).
func (l *execLog) commandSessions() int {
	return strings.Count(l.srv.Log(), "Starting session: command ")
}

// TestChecksumProcesses: a small file's checksum is one command session that starts exactly ONE
// process on the server, the coreutils hash (`env LC_ALL=C sha256sum -- FILE`: the login shell
// execs env, env execs sha256sum), with no shell of its own and no openssl; a big file's is
// `env LC_ALL=C sh -c SCRIPT` that tests openssl once per server when the FSes share a
// digest.Tools (as the API's do), and in every checksum without one.
func TestChecksumProcesses(t *testing.T) {
	l := newExecLog(t)
	conn, err := ssh.Dial("tcp", l.srv.Addr, l.srv.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e := &env{conn: conn, run: sessionRunner{conn}, dir: l.srv.MkTemp(t)}
	if e.sftp, err = sftp.NewClient(conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.sftp.Close() })
	small, big := []byte("8 bytes\n"), make([]byte, digest.BigFile+1)
	_, _ = rand.Read(big)
	for name, b := range map[string][]byte{"small": small, "big": big} {
		if err := os.WriteFile(filepath.Join(e.dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	// check runs one checksum and wants one command session running the programs want in procs
	// processes.
	check := func(f *FS, name string, procs int, want ...string) {
		t.Helper()
		l.started(t)
		sessions := l.commandSessions()
		got, err := f.Checksum(t.Context(), filepath.Join(e.dir, name), "sha256")
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(e.dir, name)); got != sum(b) {
			t.Errorf("%s: checksum %s, want %s", name, got, sum(b))
		}
		if n := l.commandSessions() - sessions; n != 1 {
			t.Errorf("%s: %d command sessions, want 1", name, n)
		}
		progs, n := l.started(t)
		if !slices.Equal(progs, want) {
			t.Errorf("%s: ran %q, want %q", name, progs, want)
		}
		if n != procs {
			t.Errorf("%s: %q ran in %d processes, want %d", name, progs, n, procs)
		}
	}
	tools := new(digest.Tools)
	shared := func() *FS { return e.fs(Options{Tools: tools}) } // as the API builds one per request
	small1 := []string{"env", "sha256sum"}                      // env execs sha256sum: one process
	check(shared(), "small", 1, small1...)
	check(shared(), "small", 1, small1...)
	// env execs sh, which starts the self-test's openssl and the hashing one.
	check(shared(), "big", 3, "env", "sh", "openssl", "openssl")
	check(shared(), "big", 2, "env", "sh", "openssl")
	check(shared(), "small", 1, small1...)
	check(e.fs(Options{}), "small", 1, small1...)
	check(e.fs(Options{}), "big", 3, "env", "sh", "openssl", "openssl")
	check(e.fs(Options{}), "big", 3, "env", "sh", "openssl", "openssl")
}

// TestChecksumSharedShellProcesses: through the pool (command.Exec, as the API runs it), a small
// file's checksum runs on the connection's shared shell: after the first one (in a session of
// its own, since the pool dials only for sessions) and the shell's start (`sh`, one command
// session), every checksum starts exactly ONE process on the server, sha256sum, and no command
// session; a big file's still runs in a session of its own with openssl.
func TestChecksumSharedShellProcesses(t *testing.T) {
	l := newExecLog(t)
	pool := sshpool.New(sshpool.Config{}, nil, nil)
	if err := pool.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pool.Stop(ctx)
	})
	tg := sshpool.Target{Key: sshpool.Key{System: "checksum", User: l.srv.User, Credential: "key"}, Addr: l.srv.Addr, Config: l.srv.ClientConfig(), MaxSessions: 10}
	conn, err := ssh.Dial("tcp", l.srv.Addr, l.srv.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e := &env{conn: conn, run: command.Exec{Pool: pool, Target: tg}, dir: l.srv.MkTemp(t)}
	if e.sftp, err = sftp.NewClient(conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.sftp.Close() })
	small, big := []byte("8 bytes\n"), make([]byte, digest.BigFile+1)
	_, _ = rand.Read(big)
	for name, b := range map[string][]byte{"small": small, "big": big, "it's a\nname": small} {
		if err := os.WriteFile(filepath.Join(e.dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tools := new(digest.Tools)
	check := func(name string, sessions, procs int, want ...string) {
		t.Helper()
		l.started(t)
		before := l.commandSessions()
		got, err := e.fs(Options{Tools: tools}).Checksum(t.Context(), filepath.Join(e.dir, name), "sha256")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(e.dir, name))
		if s := sha256.Sum256(b); got != hex.EncodeToString(s[:]) {
			t.Errorf("%q: checksum %s, want %x", name, got, s)
		}
		if n := l.commandSessions() - before; n != sessions {
			t.Errorf("%q: %d command sessions, want %d", name, n, sessions)
		}
		progs, n := l.started(t)
		if !slices.Equal(progs, want) || n != procs {
			t.Errorf("%q: ran %q in %d processes, want %q in %d", name, progs, n, want, procs)
		}
	}
	check("small", 1, 1, "env", "sha256sum") // no connection yet: a session, which dials
	check("small", 1, 2, "sh", "sha256sum")  // the shell starts (sh), then forks sha256sum
	for range 3 {
		check("small", 0, 1, "sha256sum")
	}
	check("it's a\nname", 0, 1, "sha256sum")
	check("big", 1, 3, "env", "sh", "openssl", "openssl")
	check("small", 0, 1, "sha256sum")
	if _, err := e.fs(Options{}).Checksum(t.Context(), filepath.Join(e.dir, "missing"), "sha256"); !isKind(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want not found", err)
	}
	// The tool's error, merged into the shell's output, is still classified.
	l.started(t)
	if _, err := e.fs(Options{}).Checksum(t.Context(), "/etc/shadow", "sha256"); !isKind(err, fs.ErrPermission) || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("unreadable file: %v, want permission denied", err)
	}
	if progs, _ := l.started(t); !slices.Equal(progs, []string{"sha256sum"}) {
		t.Errorf("unreadable file: ran %q, want sha256sum on the shared shell", progs)
	}
}
