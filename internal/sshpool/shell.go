package sshpool

// Shared shells. A short command that only reads (the checksum of a small file) costs the
// server far more to start in a session channel of its own than to run: for every channel sshd
// forks a session process and execs the login shell, about 5 ms of server CPU for `true` on the
// 2-core test machine, 7 ms for `sha256sum` of 8 bytes, while a POSIX sh that is already running
// forks and execs only the command (1.5 ms). So each connection may carry one long-lived `sh`
// reading commands from its stdin, shared by concurrent callers as the shared SFTP channel is:
// commands are written in order and run one after another; each one's output (stdout with
// stderr merged into it) ends with a line holding a marker secret to this process and the
// command's exit status. A shell holds one of its connection's slots for its life.
//
// Bounds, all per key (one owner's credential on one system, so a shell only ever runs one
// owner's commands): at most one shell per connection, at most Config.ShellDepth commands queued
// on a shell, at most shellMaxOutput bytes of output per command. A caller that finds every
// shell of its key full and no connection with a free slot for a new one gets ErrShellBusy and
// runs its command in a session of its own. A caller that gives up (its context ends) while its
// command is queued or running kills the shell (SIGKILL to its process group), and the commands
// queued behind it end with ErrShellLost: a stuck command (a hung file system) cannot hold later
// ones for longer than the caller waits. Such a command may have run; callers send only commands
// that may run twice (reads).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

var (
	// ErrShellBusy means no shared shell could take a command now (every one is full, none
	// could be opened, or shared shells are off): run it in a session of its own.
	ErrShellBusy = errors.New("no shared shell free")
	// ErrShellLost means a shared shell ended before a command's result arrived: the command
	// may or may not have run.
	ErrShellLost = errors.New("shared shell lost")
)

// shellMaxOutput bounds one command's output on a shared shell; a command that writes more
// kills the shell (its callers then run their commands in sessions of their own).
const shellMaxOutput = 64 << 10

// shellChan is one connection's shared shell.
type shellChan struct {
	sess   *ssh.Session
	in     io.WriteCloser
	out    io.Reader
	marker []byte // "\n" + nonce + " ": starts the line after each command's output

	// Pool mutex.
	queued   int // commands sent or about to be, not yet returned
	lastUsed time.Time
	retired  bool // takes no more commands

	// wmu orders the commands written; mu guards pending (in the order written) and ended.
	wmu     sync.Mutex
	mu      sync.Mutex
	pending []chan shellResult
	ended   error // set when the reader stopped; no more commands
}

type shellResult struct {
	out    []byte
	status int
	err    error
}

// Close ends the shell's channel (and so the shell); openBounded calls it on a shell that
// started too late.
func (s *shellChan) Close() error { return s.sess.Close() }

// ShellRun runs line, one POSIX sh command whose words the caller quoted, on a shared shell of
// one of t's connections, with stdin from /dev/null and stderr merged into stdout, and returns
// its output and exit status. It returns an error wrapping ErrShellBusy when no shell can take
// the command now (nothing ran), ErrShellLost when the shell ended before the result arrived
// (the command may have run), or ctx's error after killing the shell when ctx ended first.
func (p *Pool) ShellRun(ctx context.Context, t Target, line string) ([]byte, int, error) {
	out, status, err := p.shellRun(ctx, t, line)
	result := "ran"
	switch {
	case errors.Is(err, ErrShellBusy):
		result = "busy"
	case errors.Is(err, ErrShellLost):
		result = "lost"
	case err != nil:
		result = "abandoned"
	}
	p.metrics.shellRuns.WithLabelValues(result).Inc()
	return out, status, err
}

// shellRun is ShellRun without the count.
func (p *Pool) shellRun(ctx context.Context, t Target, line string) ([]byte, int, error) {
	c, sh, err := p.borrowShell(ctx, t)
	if err != nil {
		return nil, -1, err
	}
	defer p.returnShell(c, sh)
	res, err := sh.send(line)
	if err != nil {
		return nil, -1, err
	}
	select {
	case r := <-res:
		return r.out, r.status, r.err
	case <-ctx.Done():
		p.retireShell(sh, true)
		return nil, -1, fmt.Errorf("command on a shared shell abandoned: %w", ctx.Err())
	}
}

// borrowShell counts one command on the least loaded shell of t's key with room, opening a
// shell on a connection without one when every shell is busy (and none is being opened).
func (p *Pool) borrowShell(ctx context.Context, t Target) (*conn, *shellChan, error) {
	p.mu.Lock()
	kp := p.keys[t.Key]
	if p.cfg.ShellDepth <= 0 || p.closing || kp == nil || kp.authErr != nil || time.Now().Before(kp.shellRetryAt) {
		p.mu.Unlock()
		return nil, nil, ErrShellBusy // a session of its own dials, waits or fails as it should
	}
	var best *conn
	for _, c := range kp.conns {
		if sh := c.shell; sh != nil && !c.dead && !sh.retired && sh.queued < p.cfg.ShellDepth &&
			(best == nil || sh.queued < best.shell.queued) {
			best = c
		}
	}
	if best == nil || best.shell.queued > 0 {
		if c := kp.shellLessConnLocked(); c != nil && !kp.shellOpening {
			return p.openShellLocked(ctx, kp, c) // unlocks
		}
	}
	if best == nil {
		p.mu.Unlock()
		return nil, nil, ErrShellBusy
	}
	best.shell.queued++
	p.mu.Unlock()
	return best, best.shell, nil
}

// shellLessConnLocked is a live connection of kp with no shell and a free slot for one.
func (kp *keyPool) shellLessConnLocked() *conn {
	for _, c := range kp.conns {
		if c.shell == nil && c.hasRoom() {
			return c
		}
	}
	return nil
}

// openShellLocked opens a shell on c (whose slot it takes) and counts the caller's command on
// it. It is called with the pool's mutex held and returns with it released.
func (p *Pool) openShellLocked(ctx context.Context, kp *keyPool, c *conn) (*conn, *shellChan, error) {
	kp.shellOpening = true
	c.lendLocked(placeControl)
	p.mu.Unlock()
	ch, err := p.openBounded(c, func(cl *ssh.Client) (any, error) { return startShell(cl) })
	p.mu.Lock()
	defer p.mu.Unlock()
	kp.shellOpening = false
	c.inUse--
	if err == nil && (c.dead || p.closing || ctx.Err() != nil) {
		go ch.(*shellChan).Close()
		err = errors.New("connection closing")
	}
	if err != nil {
		var oce *ssh.OpenChannelError
		if !c.dead && !errors.As(err, &oce) && !p.closing {
			kp.shellRetryAt = time.Now().Add(shellRetry) // the session opened but sh did not answer
		}
		if !c.dead {
			p.serveWaitersLocked(kp)
		}
		p.checkDrainedLocked()
		return nil, nil, fmt.Errorf("%w: open a shared shell: %w", ErrShellBusy, err)
	}
	sh := ch.(*shellChan)
	c.slots-- // the slot is the shell's for its life; readShell gives it back
	c.shell = sh
	sh.queued = 1
	p.wg.Add(1)
	go p.readShell(c, sh)
	return c, sh, nil
}

// shellRetry is how long a key waits before it tries to open a shared shell again after one
// failed to start or to answer (a login shell that cannot exec sh, a ForceCommand).
const shellRetry = time.Minute

// startShell opens a session on cl running `exec sh`, whose stdin takes the commands, and
// waits for the shell to answer a first empty command: whatever the login shell printed before
// (a noisy rc file) is skipped, and a session that never runs sh fails here instead of holding
// the commands sent to it.
func startShell(cl *ssh.Client) (*shellChan, error) {
	sess, err := cl.NewSession()
	if err != nil {
		return nil, err
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	sh := &shellChan{sess: sess, marker: []byte("\n" + hex.EncodeToString(nonce[:]) + " ")}
	if sh.in, err = sess.StdinPipe(); err == nil {
		if sh.out, err = sess.StdoutPipe(); err == nil {
			err = sess.Start("exec sh") // the login shell replaced by sh, from any login shell
		}
	}
	if err == nil {
		err = sh.handshake()
	}
	if err != nil {
		_ = sess.Close()
		return nil, err
	}
	return sh, nil
}

// handshake sends sh an empty command and reads up to its marker line.
func (sh *shellChan) handshake() error {
	if _, err := io.WriteString(sh.in, "printf '\\n%s%d\\n' '"+string(sh.marker[1:])+"' 0\n"); err != nil {
		return fmt.Errorf("start shell: %w", err)
	}
	want := append(bytes.Clone(sh.marker), "0\n"...)
	var acc []byte
	buf := make([]byte, 4<<10)
	for !bytes.Contains(acc, want) {
		if len(acc) > shellMaxOutput {
			return errors.New("start shell: no answer within its first 64 KiB of output")
		}
		n, err := sh.out.Read(buf)
		acc = append(acc, buf[:n]...)
		if err != nil && !bytes.Contains(acc, want) {
			return fmt.Errorf("start shell: the session ended before sh answered: %w", err)
		}
	}
	if rest := acc[bytes.Index(acc, want)+len(want):]; len(rest) > 0 {
		return errors.New("start shell: output after its answer")
	}
	return nil
}

// returnShell uncounts a command of sh on c.
func (p *Pool) returnShell(c *conn, sh *shellChan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sh.queued--
	sh.lastUsed = time.Now()
	c.lastUsed = sh.lastUsed
	p.checkDrainedLocked()
}

// retireShell stops sh from taking commands and ends it: at once (SIGKILL to its process
// group, then the channel closed) when kill, else by closing its stdin, so that it exits after
// the commands it has.
func (p *Pool) retireShell(sh *shellChan, kill bool) {
	p.mu.Lock()
	sh.retired = true
	p.mu.Unlock()
	if kill {
		go func() {
			_ = sh.sess.Signal(ssh.SIGKILL)
			_ = sh.sess.Close()
		}()
		return
	}
	go sh.in.Close()
}

// send writes line to sh and returns where its result will arrive. Writes are ordered by wmu
// alone, so a write that waits for the channel's window never holds up the reader.
func (sh *shellChan) send(line string) (<-chan shellResult, error) {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	sh.mu.Lock()
	if sh.ended != nil {
		sh.mu.Unlock()
		return nil, sh.ended
	}
	res := make(chan shellResult, 1)
	sh.pending = append(sh.pending, res)
	sh.mu.Unlock()
	// printf is a builtin of every POSIX sh, so the command is the only process started. A
	// failed write needs no handling here: the channel has ended, and the reader fails every
	// pending result, this one included.
	_, _ = io.WriteString(sh.in, line+" </dev/null 2>&1; printf '\\n%s%d\\n' '"+string(sh.marker[1:])+"' \"$?\"\n")
	return res, nil
}

// readShell delivers sh's results in order until its channel ends, then fails what is pending
// and gives the shell's slot back to c.
func (p *Pool) readShell(c *conn, sh *shellChan) {
	defer p.wg.Done()
	err := sh.read()
	if err != nil {
		_ = sh.sess.Signal(ssh.SIGKILL)
	}
	_ = sh.sess.Close()
	sh.mu.Lock()
	sh.ended = fmt.Errorf("%w: %w", ErrShellLost, errors.Join(err, io.ErrUnexpectedEOF))
	pending := sh.pending
	sh.pending = nil
	sh.mu.Unlock()
	for _, r := range pending {
		r <- shellResult{status: -1, err: sh.ended}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sh.retired = true
	if c.shell == sh {
		c.shell = nil
		if !c.dead {
			c.slots++
			p.serveWaitersLocked(c.kp)
		}
	}
	p.checkDrainedLocked()
}

// read parses sh's output into results until the channel ends (nil) or the output breaks the
// protocol (an error).
func (sh *shellChan) read() error {
	var acc []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := sh.out.Read(buf)
		acc = append(acc, buf[:n]...)
		for {
			i := bytes.Index(acc, sh.marker)
			if i < 0 {
				break
			}
			rest := acc[i+len(sh.marker):]
			end := bytes.IndexByte(rest, '\n')
			if end < 0 {
				break
			}
			status, perr := strconv.Atoi(string(rest[:end]))
			if perr != nil {
				return fmt.Errorf("shell status line: %w", perr)
			}
			out := bytes.Clone(acc[:i])
			acc = rest[end+1:]
			sh.mu.Lock()
			if len(sh.pending) == 0 {
				sh.mu.Unlock()
				return errors.New("shell result with no command waiting")
			}
			r := sh.pending[0]
			sh.pending = sh.pending[1:]
			sh.mu.Unlock()
			r <- shellResult{out: out, status: status}
		}
		if len(acc) > shellMaxOutput+len(sh.marker)+16 {
			return fmt.Errorf("a command on the shared shell wrote more than %d bytes", shellMaxOutput)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
