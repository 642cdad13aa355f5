package service

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// ioDeadlines bounds each read of a request body and each write of a response instead of the
// request as a whole, so that a download, an NDJSON or SSE stream or an upload may run as long as
// it keeps moving, while a client that stops sending or stops reading is dropped after
// readIdle or writeIdle. (http.Server's ReadTimeout and WriteTimeout run from the start of the
// request and would cut every long stream, and a long-running command before its first byte.)
//
// A handler that sets its own deadline through http.ResponseController takes over that
// direction for the rest of its request; this layer then stops re-arming it.
func ioDeadlines(next http.Handler, readIdle, writeIdle time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: writeIdle}
		// A keep-alive connection may carry the previous request's write deadline.
		_ = dw.rc.SetWriteDeadline(time.Time{})
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &deadlineBody{ReadCloser: r.Body, w: dw, idle: readIdle}
		}
		next.ServeHTTP(dw, r)
	})
}

// deadlineWriter re-arms the connection's write deadline before each write and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration

	ownWrite atomic.Bool // the handler set a write deadline itself
	ownRead  atomic.Bool // the handler set a read deadline itself
}

func (w *deadlineWriter) arm() {
	if !w.ownWrite.Load() {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.idle))
	}
}

// Write implements http.ResponseWriter.
func (w *deadlineWriter) Write(b []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *deadlineWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// SetWriteDeadline is what http.ResponseController.SetWriteDeadline calls: the handler manages
// write deadlines from now on.
func (w *deadlineWriter) SetWriteDeadline(t time.Time) error {
	w.ownWrite.Store(true)
	return w.rc.SetWriteDeadline(t)
}

// SetReadDeadline is what http.ResponseController.SetReadDeadline calls: the handler manages
// read deadlines from now on.
func (w *deadlineWriter) SetReadDeadline(t time.Time) error {
	w.ownRead.Store(true)
	return w.rc.SetReadDeadline(t)
}

// Hijack passes a hijack through; the caller owns the connection's deadlines afterwards.
func (w *deadlineWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.ownWrite.Store(true)
	w.ownRead.Store(true)
	return w.rc.Hijack()
}

// Unwrap lets http.ResponseController reach the server's writer for everything else.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody re-arms the read deadline before each read of the body and clears it when a read
// fails or the body ends, so that nothing after the body (net/http's watch for a closed
// connection while the handler works) inherits it.
type deadlineBody struct {
	io.ReadCloser
	w    *deadlineWriter
	idle time.Duration
}

// Read implements io.Reader.
func (b *deadlineBody) Read(p []byte) (int, error) {
	own := b.w.ownRead.Load()
	if !own {
		_ = b.w.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil && !own && !b.w.ownRead.Load() {
		_ = b.w.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
