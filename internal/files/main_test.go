package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// testServer is the one sshd the package's tests share; TestMain starts and stops it.
var testServer *sshtest.Server

func TestMain(m *testing.M) {
	srv, err := sshtest.Start(context.Background(), sshtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "files tests:", err)
		os.Exit(1)
	}
	testServer = srv
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "files tests: close sshd:", err)
	}
	os.Exit(code)
}

// sessionRunner runs commands over a fresh ssh.Session each, as the pool's exec channels will.
type sessionRunner struct {
	conn *ssh.Client
}

// Run implements Runner.
func (r sessionRunner) Run(ctx context.Context, command string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	s, err := r.conn.NewSession()
	if err != nil {
		return 0, fmt.Errorf("new session: %w", err)
	}
	defer s.Close()
	s.Stdin, s.Stdout, s.Stderr = stdin, stdout, stderr
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Close()
		case <-done:
		}
	}()
	err = s.Run(command)
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		return exit.ExitStatus(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("run: %w", err)
	}
	return 0, nil
}

// noRunner fails the test if an operation starts a remote process.
type noRunner struct{ t testing.TB }

// Run implements Runner.
func (n noRunner) Run(_ context.Context, command string, _ io.Reader, _, _ io.Writer) (int, error) {
	n.t.Errorf("unexpected remote command: %s", command)
	return 1, errors.New("no commands allowed")
}

// env is one test's connection to the shared server.
type env struct {
	conn *ssh.Client
	sftp *sftp.Client
	run  Runner
	dir  string // fresh remote directory owned by the test user
}

// newEnv dials the shared server and makes a fresh remote directory.
func newEnv(t testing.TB) *env {
	t.Helper()
	conn, err := ssh.Dial("tcp", testServer.Addr, testServer.ClientConfig())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c, err := sftp.NewClient(conn, sftp.UseConcurrentWrites(true))
	if err != nil {
		t.Fatalf("sftp: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &env{conn: conn, sftp: c, run: sessionRunner{conn}, dir: testServer.MkTemp(t)}
}

// fs returns an FS over e with opts.
func (e *env) fs(opts Options) *FS {
	return New(e.sftp, e.run, opts)
}

// isKind reports whether err is non-nil and classified as kind.
func isKind(err, kind error) bool {
	return err != nil && errors.Is(err, kind)
}
