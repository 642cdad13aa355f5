package files

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/digest"
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
