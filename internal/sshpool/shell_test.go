package sshpool

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestSharedShell: short commands run on one shared shell per connection: each command's output
// (stderr merged) and exit status arrive, in order under concurrency; a caller that gives up
// kills the shell (the command queued behind it ends with ErrShellLost) and the next command
// gets a fresh shell; a command that writes too much ends its shell; an idle shell exits and
// gives its slot back; with shell_depth -1 there are none.
func TestSharedShell(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	ctx := t.Context()
	// warm opens the key's first connection: ShellRun never dials.
	warm := func(t *testing.T, p *Pool, tg Target) {
		t.Helper()
		if _, _, err := p.ShellRun(ctx, tg, "true"); !errors.Is(err, ErrShellBusy) {
			t.Fatalf("no connection yet: %v, want ErrShellBusy", err)
		}
		if _, err := run(ctx, p, tg, "true"); err != nil {
			t.Fatal(err)
		}
	}
	// pid is the process id of the shell that runs the command ($$ is expanded by it).
	pid := func(t *testing.T, p *Pool, tg Target) string {
		t.Helper()
		out, st, err := p.ShellRun(ctx, tg, `printf '%s' "$$"`)
		if err != nil || st != 0 {
			t.Fatalf("pid: %q %d %v", out, st, err)
		}
		return string(out)
	}

	t.Run("results", func(t *testing.T) {
		p, _ := newPool(t, Config{})
		tg := target(t, srv, "results", srv.Signer)
		warm(t, p, tg)
		first := pid(t, p, tg)
		for _, c := range []struct {
			line, out string
			status    int
		}{
			{`printf 'no newline'`, "no newline", 0},
			{`sh -c 'echo out; echo err >&2; exit 3'`, "out\nerr\n", 3},
			{`printf '\n\n'`, "\n\n", 0},
			{`LC_ALL=C ls /nonexistent-sshapi`, "ls: cannot access '/nonexistent-sshapi': No such file or directory\n", 2},
			{`cat`, "", 0}, // stdin is /dev/null, not the shell's own input
			{`printf '%s\n' 'multi
line'`, "multi\nline\n", 0},
		} {
			out, st, err := p.ShellRun(ctx, tg, c.line)
			if err != nil || string(out) != c.out || st != c.status {
				t.Errorf("%s: %q, %d, %v; want %q, %d", c.line, out, st, err, c.out, c.status)
			}
		}
		if again := pid(t, p, tg); again != first {
			t.Errorf("commands ran in shells %s and %s, want one shared shell", first, again)
		}
		if s := p.Stats(); s.Shells != 1 || s.ShellQueued != 0 {
			t.Errorf("stats %+v, want one shell with nothing queued", s)
		}
		// Concurrent commands get their own results; beyond shell_depth on the one connection
		// a command is refused with ErrShellBusy (its caller runs it in a session of its own).
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for i := range 40 {
			wg.Go(func() {
				out, st, err := p.ShellRun(ctx, tg, "printf '%s\\n' "+strconv.Itoa(i))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, ErrShellBusy):
				case err != nil || st != 0 || string(out) != strconv.Itoa(i)+"\n":
					t.Errorf("command %d: %q %d %v", i, out, st, err)
				default:
					ok++
				}
			})
		}
		wg.Wait()
		if ok < p.cfg.ShellDepth {
			t.Errorf("%d of 40 concurrent commands ran on the shell, want at least shell_depth %d", ok, p.cfg.ShellDepth)
		}
		// Ran: the two pids, the six commands above and the concurrent ones; busy: warm's first.
		if ran, busy := shellCount(p, "ran"), shellCount(p, "busy"); ran != float64(ok+8) || busy != float64(40-ok+1) {
			t.Errorf("counted %g ran and %g busy, want %d and %d", ran, busy, ok+8, 40-ok+1)
		}
	})

	t.Run("abandoned", func(t *testing.T) {
		p, _ := newPool(t, Config{})
		tg := target(t, srv, "abandoned", srv.Signer)
		warm(t, p, tg)
		first := pid(t, p, tg)
		sctx, cancel := context.WithCancel(ctx)
		slow := make(chan error, 1)
		go func() { _, _, err := p.ShellRun(sctx, tg, "sleep 600"); slow <- err }()
		waitFor(t, "the sleep to be written to the shell", func() bool { return pendingOnShells(p, tg) == 1 })
		behind := make(chan error, 1)
		go func() { _, _, err := p.ShellRun(ctx, tg, "echo behind"); behind <- err }()
		waitFor(t, "the second command to be written behind it", func() bool { return pendingOnShells(p, tg) == 2 })
		cancel()
		if err := <-slow; !errors.Is(err, context.Canceled) {
			t.Errorf("abandoned command: %v, want context.Canceled", err)
		}
		if err := <-behind; !errors.Is(err, ErrShellLost) {
			t.Errorf("command behind the abandoned one: %v, want ErrShellLost", err)
		}
		if a, l := shellCount(p, "abandoned"), shellCount(p, "lost"); a != 1 || l != 1 {
			t.Errorf("counted %g abandoned and %g lost, want 1 and 1", a, l)
		}
		waitFor(t, "the killed shell's slot to return", func() bool { s := p.Stats(); return s.Shells == 0 && s.ChannelsInUse == 0 })
		if again := pid(t, p, tg); again == first {
			t.Error("the next command ran on the killed shell")
		}
	})

	t.Run("too much output", func(t *testing.T) {
		p, _ := newPool(t, Config{})
		tg := target(t, srv, "output", srv.Signer)
		warm(t, p, tg)
		if _, _, err := p.ShellRun(ctx, tg, "head -c 1000000 /dev/zero"); !errors.Is(err, ErrShellLost) {
			t.Fatalf("1 MB of output: %v, want ErrShellLost", err)
		}
		waitFor(t, "the shell's slot to return", func() bool { return p.Stats().Shells == 0 })
		pid(t, p, tg)
	})

	t.Run("idle", func(t *testing.T) {
		p, _ := newPool(t, Config{SFTPIdleTimeout: 100 * time.Millisecond})
		tg := target(t, srv, "idle", srv.Signer)
		warm(t, p, tg)
		pid(t, p, tg)
		waitFor(t, "the idle shell to exit and give its slot back", func() bool { s := p.Stats(); return s.Shells == 0 && s.ChannelsInUse == 0 })
		if s := p.Stats(); s.Conns != 1 {
			t.Errorf("%d connections after the shell exited, want the one", s.Conns)
		}
	})

	t.Run("no sh", func(t *testing.T) {
		// A server whose ForceCommand replaces every command: the shell never answers, the
		// command is refused with ErrShellBusy (its caller runs it in a session), and the key
		// does not try again at once.
		forced := sshtest.New(t, sshtest.Options{ExtraConfig: "ForceCommand echo nope"})
		p, _ := newPool(t, Config{})
		tg := target(t, forced, "forced", forced.Signer)
		warm(t, p, tg)
		sessions := func() int { return strings.Count(forced.Log(), "Starting session: ") }
		if _, _, err := p.ShellRun(ctx, tg, "true"); !errors.Is(err, ErrShellBusy) {
			t.Fatalf("shell under ForceCommand: %v, want ErrShellBusy", err)
		}
		before := sessions()
		if before < 2 {
			t.Fatalf("%d sessions logged, want the warm-up's and the shell's (is LogLevel VERBOSE?)", before)
		}
		if _, _, err := p.ShellRun(ctx, tg, "true"); !errors.Is(err, ErrShellBusy) {
			t.Fatalf("again: %v, want ErrShellBusy", err)
		}
		if n := sessions() - before; n != 0 {
			t.Errorf("%d more sessions opened for a shell right after one failed, want none", n)
		}
		if s := p.Stats(); s.Shells != 0 || s.ChannelsInUse != 0 {
			t.Errorf("stats %+v, want no shell and no channel in use", s)
		}
	})

	t.Run("off", func(t *testing.T) {
		p, _ := newPool(t, Config{ShellDepth: -1})
		tg := target(t, srv, "off", srv.Signer)
		warm(t, p, tg)
		if _, _, err := p.ShellRun(ctx, tg, "true"); !errors.Is(err, ErrShellBusy) {
			t.Fatalf("shell_depth -1: %v, want ErrShellBusy", err)
		}
	})
}

// pendingOnShells is the number of commands written to tg's shells whose results are awaited.
func pendingOnShells(p *Pool, tg Target) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	if kp := p.keys[tg.Key]; kp != nil {
		for _, c := range kp.conns {
			if c.shell != nil {
				c.shell.mu.Lock()
				n += len(c.shell.pending)
				c.shell.mu.Unlock()
			}
		}
	}
	return n
}

// shellCount is the pool's count of shell commands with result.
func shellCount(p *Pool, result string) float64 {
	return testutil.ToFloat64(p.metrics.shellRuns.WithLabelValues(result))
}
