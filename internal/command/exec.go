package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/shell"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// Exec runs helper commands (checksums, server-side copies, tar) on one target with the caller's
// own stdin and output writers; it satisfies files.Runner. ctx ending kills the remote process
// group.
type Exec struct {
	Pool   Sessions
	Target sshpool.Target
}

// Run runs command and returns its exit status. err is non-nil only when the command could not
// run or its outcome is unknown (connection lost, canceled, killed by a signal).
func (e Exec) Run(ctx context.Context, command string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	// Nothing reads stdin before the exec request succeeded, so a second start is safe.
	sess, err := startSession(ctx, e.Pool, e.Target, command, func(sess *sshpool.Session) {
		sess.Stdin, sess.Stdout, sess.Stderr = stdin, stdout, stderr
	})
	if err != nil {
		return -1, err
	}
	defer sess.Close()
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = kill(sess, done)
		return -1, fmt.Errorf("command abandoned: %w", ctx.Err())
	}
	var ee *ssh.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ee.Signal() == "":
		return ee.ExitStatus(), nil
	case errors.As(err, &ee):
		return -1, fmt.Errorf("command killed by signal %s", ee.Signal())
	}
	return -1, fmt.Errorf("%w: %w", sshpool.ErrConnLost, err)
}

// OpenSubsystem starts subsystem name (such as "sftp") on a pooled session channel of its own
// and returns its standard input and output; Close ends the session and frees the channel. It
// satisfies files.Channels.
func (e Exec) OpenSubsystem(ctx context.Context, name string) (io.ReadWriteCloser, error) {
	s, err := e.openSubsystem(ctx, name)
	if errors.Is(err, sshpool.ErrConnLost) && ctx.Err() == nil {
		// The connection died under the request: once more on a fresh one (starting a
		// subsystem such as sftp-server twice changes nothing on the server).
		s, err = e.openSubsystem(ctx, name)
	}
	return s, err
}

// openSubsystem is one attempt of OpenSubsystem.
func (e Exec) openSubsystem(ctx context.Context, name string) (io.ReadWriteCloser, error) {
	sess, err := e.Pool.NewSession(ctx, e.Target)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	in, err := sess.StdinPipe()
	if err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("subsystem %s: %w", name, err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("subsystem %s: %w", name, err)
	}
	if err := sess.RequestSubsystem(name); err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("subsystem %s: %w", name, err)
	}
	return &subsystem{Reader: out, in: in, sess: sess}, nil
}

// subsystem is a running subsystem's input and output on one session.
type subsystem struct {
	io.Reader
	in   io.WriteCloser
	sess *sshpool.Session
}

func (s *subsystem) Write(p []byte) (int, error) { return s.in.Write(p) }

// Close ends the session; it is safe to call more than once and concurrently with Read.
func (s *subsystem) Close() error { return s.sess.Close() }

// Shells runs short commands on shared shells; *sshpool.Pool implements it (sshpool.ShellRun).
type Shells interface {
	ShellRun(ctx context.Context, t sshpool.Target, line string) ([]byte, int, error)
}

// maxReadOutput caps the output RunRead keeps from a session of its own (a shared shell's is
// capped by the pool).
const maxReadOutput = 64 << 10

// RunRead runs argv, a command that only reads and so may run twice, under LC_ALL=C with stdin
// from /dev/null, and returns its output (stdout with stderr merged into it) and exit status. It
// satisfies files.ReadRunner. When the pool has shared shells (Shells) the command runs on one:
// the shell forks and execs the command alone, with no session, login shell or env process of
// its own. When no shell is free, or the shell ended before the result arrived, it runs in a
// session of its own (`env LC_ALL=C argv…`, so again one process on the server).
func (e Exec) RunRead(ctx context.Context, argv ...string) ([]byte, int, error) {
	if sh, ok := e.Pool.(Shells); ok {
		line := "LC_ALL=C"
		for _, a := range argv {
			line += " " + shell.Quote(a)
		}
		out, status, err := sh.ShellRun(ctx, e.Target, line)
		if err == nil || ctx.Err() != nil || !(errors.Is(err, sshpool.ErrShellBusy) || errors.Is(err, sshpool.ErrShellLost)) {
			return out, status, err
		}
	}
	out := &capped{max: maxReadOutput}
	status, err := e.Run(ctx, shell.Command(argv...), nil, out, out)
	return out.buf.Bytes(), status, err
}

// capped keeps the first max bytes written to it from both output streams, in arrival order.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

// Write implements io.Writer; it never fails, so a chatty command is not cut off.
func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
