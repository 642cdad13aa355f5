// Package command runs one non-interactive command on a remote system over a pooled SSH channel,
// with a timeout that kills the remote process group, caps on captured output, optional stdin,
// and live streaming of output as it arrives.
package command

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshpool"
)

// Defaults and limits for Request fields.
const (
	DefaultTimeout   = 60 * time.Second
	MaxTimeout       = 24 * time.Hour
	DefaultMaxOutput = 1 << 20
	MaxMaxOutput     = 64 << 20
	// killGrace is how long to wait for the exit status after sending SIGKILL.
	killGrace = 3 * time.Second
)

// Request is one command to run.
type Request struct {
	// Command is passed to the remote user's login shell as `shell -c Command`.
	Command string
	// Timeout bounds the command's run time (not the wait for a channel); DefaultTimeout if zero.
	Timeout time.Duration
	// Stdin is written to the command's standard input, which is then closed.
	Stdin []byte
	// MaxOutput caps the bytes kept of stdout and of stderr each; DefaultMaxOutput if zero.
	// Output beyond the cap is read and discarded, so the command is never blocked by it.
	MaxOutput int64
}

// Result is what a finished command produced. A non-zero exit is a result, not an error.
type Result struct {
	ExitStatus      *int   `json:"exit_status"`
	Signal          string `json:"signal,omitempty"`
	Stdout          string `json:"stdout"`
	StdoutEncoding  string `json:"stdout_encoding,omitempty"`
	Stderr          string `json:"stderr"`
	StderrEncoding  string `json:"stderr_encoding,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	TimedOut        bool   `json:"timed_out"`
	DurationMS      int64  `json:"duration_ms"`
}

// Event is one piece of a streamed command: output as it arrives, then the final result.
type Event struct {
	// Type is "stdout", "stderr" or "exit".
	Type string `json:"type"`
	// Data is a chunk of output, as text or (Encoding "base64") as base64.
	Data     string `json:"data,omitempty"`
	Encoding string `json:"encoding,omitempty"`
	// Result is set on the "exit" event; its Stdout and Stderr are empty (they were streamed).
	Result *Result `json:"result,omitempty"`
}

// Sessions lends SSH session channels; *sshpool.Pool implements it.
type Sessions interface {
	NewSession(ctx context.Context, t sshpool.Target) (*sshpool.Session, error)
}

// ErrNotStarted wraps failures that happened before the command could have started on the
// server (no channel to be had, or the connection died before the exec request was sent);
// retrying such a command cannot run it twice. It is sshpool.ErrNotStarted.
var ErrNotStarted = sshpool.ErrNotStarted

// startSession opens a session on t, lets attach set its standard streams and starts command.
// When the connection died before the exec request left this process, it does so once more on a
// fresh connection (the pool has dropped the dead one): nothing can have run the first time.
// Errors from the pool wrap ErrNotStarted; an exec request that may have reached the server
// before its connection died wraps sshpool.ErrConnLost without it.
func startSession(ctx context.Context, pool Sessions, t sshpool.Target, command string, attach func(*sshpool.Session)) (*sshpool.Session, error) {
	for attempt := 0; ; attempt++ {
		sess, err := pool.NewSession(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
		}
		attach(sess)
		err = sess.Start(command)
		if err == nil {
			return sess, nil
		}
		_ = sess.Close()
		if attempt > 0 || !errors.Is(err, ErrNotStarted) || ctx.Err() != nil {
			return nil, fmt.Errorf("start command: %w", err)
		}
	}
}

// Run executes req on t. When stream is non-nil, output is delivered through it as it arrives
// (and not kept in the Result); stream must not block for long. ctx ending early (the caller went
// away) kills the remote command like a timeout. Without stream, the output is copied into the
// Result's strings: callers that serve many users use RunBuffered instead.
func Run(ctx context.Context, pool Sessions, t sshpool.Target, req Request, stream func(Event)) (*Result, error) {
	res, stdout, stderr, err := run(ctx, pool, t, req, stream)
	if err != nil || stream != nil {
		return res, err
	}
	res.Stdout, res.StdoutEncoding = encodeChunks(stdout)
	res.Stderr, res.StderrEncoding = encodeChunks(stderr)
	return res, nil
}

// RunBuffered executes req on t and keeps its output, which must fit within reservation
// (2*MaxOutput bytes, taken from a Budget by the caller): the returned Output owns the
// reservation and gives it back on Release, and on error the reservation is released here.
func RunBuffered(ctx context.Context, pool Sessions, t sshpool.Target, req Request, reservation *Reservation) (*Output, error) {
	if req.MaxOutput <= 0 {
		req.MaxOutput = DefaultMaxOutput
	}
	if reservation == nil || reservation.n < 2*req.MaxOutput {
		reservation.Release()
		return nil, fmt.Errorf("%w: reservation smaller than twice max output", ErrBudget)
	}
	res, stdout, stderr, err := run(ctx, pool, t, req, nil)
	if err != nil {
		reservation.Release()
		return nil, err
	}
	reservation.Shrink(stdout.held() + stderr.held())
	o := &Output{Result: *res, stdout: stdout, stderr: stderr, res: reservation}
	o.StdoutEncoding = chooseEncoding(stdout)
	o.StderrEncoding = chooseEncoding(stderr)
	return o, nil
}

// encodeChunks returns captured output as a string in the encoding encodingFor picks.
func encodeChunks(c *chunks) (string, string) {
	enc := chooseEncoding(c)
	if enc == "base64" {
		return base64.StdEncoding.EncodeToString(c.bytes()), enc
	}
	return string(c.bytes()), enc
}

// run executes req and returns the result without output fields, and the kept output.
func run(ctx context.Context, pool Sessions, t sshpool.Target, req Request, stream func(Event)) (*Result, *chunks, *chunks, error) {
	if req.Timeout <= 0 {
		req.Timeout = DefaultTimeout
	}
	if req.MaxOutput <= 0 {
		req.MaxOutput = DefaultMaxOutput
	}
	var mu sync.Mutex // serializes stream calls from the stdout and stderr copiers
	emit := func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		stream(e)
	}
	stdout := &capture{max: req.MaxOutput, name: "stdout", buf: chunks{limit: req.MaxOutput}}
	stderr := &capture{max: req.MaxOutput, name: "stderr", buf: chunks{limit: req.MaxOutput}}
	if stream != nil {
		stdout.emit, stderr.emit = emit, emit
	}
	sess, err := startSession(ctx, pool, t, req.Command, func(sess *sshpool.Session) {
		sess.Stdout, sess.Stderr = stdout, stderr
		if len(req.Stdin) > 0 {
			sess.Stdin = bytes.NewReader(req.Stdin)
		}
	})
	if err != nil {
		return nil, nil, nil, err
	}
	defer sess.Close()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()

	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	res := &Result{}
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timer.C:
		res.TimedOut = true
		waitErr = kill(sess, done)
	case <-ctx.Done():
		waitErr = kill(sess, done)
		if waitErr == nil || isExit(waitErr) {
			waitErr = ctx.Err()
		}
	}
	res.DurationMS = time.Since(start).Milliseconds()
	stdout.flush()
	stderr.flush()
	if err := fill(res, waitErr); err != nil {
		return nil, nil, nil, err
	}
	for _, c := range []*capture{stdout, stderr} {
		if c.truncated {
			c.buf.trimPartialRune()
		}
	}
	res.StdoutTruncated, res.StderrTruncated = stdout.truncated, stderr.truncated
	if stream != nil {
		r := *res
		emit(Event{Type: "exit", Result: &r})
	}
	return res, &stdout.buf, &stderr.buf, nil
}

// kill sends SIGKILL to the remote command. OpenSSH delivers a "signal" request with
// killpg(2) to the session's process group, so children of the shell die too. It then waits a
// short while for the exit status and closes the channel.
func kill(sess *sshpool.Session, done <-chan error) error {
	_ = sess.Signal(ssh.SIGKILL)
	select {
	case err := <-done:
		return err
	case <-time.After(killGrace):
		_ = sess.Close()
		return <-done
	}
}

func isExit(err error) bool {
	var ee *ssh.ExitError
	var em *ssh.ExitMissingError
	return errors.As(err, &ee) || errors.As(err, &em)
}

// fill records the exit status or signal from Wait's error.
func fill(res *Result, err error) error {
	var ee *ssh.ExitError
	var em *ssh.ExitMissingError
	switch {
	case err == nil:
		zero := 0
		res.ExitStatus = &zero
	case errors.As(err, &ee):
		if ee.Signal() != "" {
			res.Signal = ee.Signal()
		} else {
			st := ee.ExitStatus()
			res.ExitStatus = &st
		}
	case errors.As(err, &em):
		// The channel closed without a status: the command was killed or the connection broke.
		if !res.TimedOut {
			return fmt.Errorf("%w: command ended without an exit status", sshpool.ErrConnLost)
		}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("command abandoned by the caller: %w", err)
	default:
		if !res.TimedOut {
			return fmt.Errorf("%w: %w", sshpool.ErrConnLost, err)
		}
	}
	return nil
}

// encode returns a streamed chunk as text when it is valid UTF-8 (and escaping would not make a
// large chunk bigger than base64), otherwise base64.
func encode(b []byte) (string, string) {
	if encodingFor(utf8.Valid(b), int64(len(b)), escapedLen(b)) == "" {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf { // ASCII: nothing partial
			return b
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// capture keeps up to max bytes of one output stream, or forwards chunks to emit when streaming
// (holding back an incomplete UTF-8 character until its remaining bytes arrive).
type capture struct {
	name      string
	max       int64
	n         int64
	buf       chunks
	pending   []byte
	truncated bool
	emit      func(Event)
}

var _ io.ReaderFrom = (*capture)(nil)

// copyBufSize is the size of the buffers capture.ReadFrom reads a stream with (io.Copy's own).
const copyBufSize = 32 << 10

// copyBufs holds the buffers of capture.ReadFrom between commands.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// ReadFrom copies r into c until EOF with a pooled buffer. The SSH session copies each output
// stream with io.Copy, which uses ReadFrom when the destination has it; without it every
// command allocated (and zeroed) a fresh 32 KiB buffer per stream, two per command.
func (c *capture) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			_, _ = c.Write(buf[:m]) // never fails: it keeps or forwards what fits
			n += int64(m)
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (c *capture) Write(p []byte) (int, error) {
	room := c.max - c.n
	keep := p
	if int64(len(keep)) > room {
		keep = keep[:max(room, 0)]
		c.truncated = true
	}
	c.n += int64(len(keep))
	if len(keep) == 0 {
		return len(p), nil
	}
	if c.emit == nil {
		c.buf.write(keep)
		return len(p), nil
	}
	chunk := append(c.pending, keep...)
	c.pending = nil
	if cut := trimPartialRune(chunk); len(cut) < len(chunk) && utf8.Valid(cut) {
		c.pending = append([]byte(nil), chunk[len(cut):]...)
		chunk = cut
	}
	c.send(chunk)
	return len(p), nil
}

func (c *capture) send(b []byte) {
	if len(b) == 0 {
		return
	}
	data, enc := encode(b)
	c.emit(Event{Type: c.name, Data: data, Encoding: enc})
}

// flush emits any held-back bytes at the end of the stream.
func (c *capture) flush() {
	if c.emit != nil && len(c.pending) > 0 {
		c.send(c.pending)
		c.pending = nil
	}
}
