package openloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
)

// ErrNotSent counts requests that were scheduled but never sent: the run's drain deadline came
// while they still waited for a free in-flight slot.
var ErrNotSent = errors.New("not sent: in-flight cap reached until the drain deadline")

// StatusError is an HTTP response with an unexpected status code.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Detail is the start of the response body, for logs.
	Detail string
}

// Error implements error.
func (e *StatusError) Error() string { return fmt.Sprintf("http %d: %s", e.Code, e.Detail) }

// Kind implements Kinder.
func (e *StatusError) Kind() string { return fmt.Sprintf("http %d", e.Code) }

// ExitError is a remote command that ran but exited with a non-zero status (or a signal).
type ExitError struct {
	// Status is the exit status; -1 when the command died by a signal.
	Status int
}

// Error implements error.
func (e *ExitError) Error() string {
	return fmt.Sprintf("remote command exited with status %d", e.Status)
}

// Kind implements Kinder.
func (e *ExitError) Kind() string { return fmt.Sprintf("exit %d", e.Status) }

// KindError is an error whose kind was decided by whoever produced it (a Python peer, the
// OpenSSH client's stderr).
type KindError struct {
	// K is the kind, e.g. "ssh: refused by MaxStartups".
	K string
	// Msg is a longer description.
	Msg string
}

// Error implements error.
func (e *KindError) Error() string {
	if e.Msg == "" {
		return e.K
	}
	return e.K + ": " + e.Msg
}

// Kind implements Kinder.
func (e *KindError) Kind() string { return e.K }

// Kinder is an error that knows its report kind.
type Kinder interface {
	error
	Kind() string
}

// Classify returns the report kind of err: one of a few stable, low-cardinality strings, so
// that a table can count errors by kind. nil is "".
func Classify(err error) string {
	if err == nil {
		return ""
	}
	var k Kinder
	if errors.As(err, &k) {
		return k.Kind()
	}
	switch {
	case errors.Is(err, ErrNotSent):
		return "not sent (in-flight cap)"
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "transport: connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "transport: connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "transport: eof"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "client: too many open files"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "client: no free local port"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return "transport: other"
	}
	if strings.Contains(err.Error(), "server closed idle connection") {
		return "transport: eof"
	}
	return "other"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
