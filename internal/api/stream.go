package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sshapi/sshapi/internal/slot"
)

// deadlineWriter writes a streamed response with a deadline on every write: StreamWriteTimeout
// from now, and never later than end (when set). A client that stops reading therefore makes
// the write fail instead of blocking the handler, and with it an SSH channel, forever. After
// the first failure every write fails at once. Safe for concurrent use.
type deadlineWriter struct {
	rc    *http.ResponseController
	w     io.Writer
	stall time.Duration
	end   time.Time

	mu     sync.Mutex
	failed error
}

func (s *Server) newDeadlineWriter(w http.ResponseWriter, end time.Time) *deadlineWriter {
	return &deadlineWriter{rc: http.NewResponseController(w), w: w, stall: s.cfg.StreamWriteTimeout, end: end}
}

func (d *deadlineWriter) arm() {
	dl := time.Now().Add(d.stall)
	if !d.end.IsZero() && dl.After(d.end) {
		dl = d.end
	}
	_ = d.rc.SetWriteDeadline(dl)
}

// Write implements io.Writer.
func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed != nil {
		return 0, d.failed
	}
	d.arm()
	n, err := d.w.Write(p)
	if err != nil {
		d.failed = err
	}
	return n, err
}

// Flush sends buffered bytes to the client, under the same deadline.
func (d *deadlineWriter) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed != nil {
		return d.failed
	}
	d.arm()
	if err := d.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		d.failed = err
		return err
	}
	return nil
}

// Err is the first write error, if any.
func (d *deadlineWriter) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// done clears the deadline so that a kept-alive connection's next response is not cut short.
func (d *deadlineWriter) done() { _ = d.rc.SetWriteDeadline(time.Time{}) }

// deadlineResponse is a ResponseWriter whose body writes go through a deadlineWriter (for
// http.ServeContent and archive streams).
type deadlineResponse struct {
	http.ResponseWriter
	dw *deadlineWriter
}

func (d deadlineResponse) Write(p []byte) (int, error) { return d.dw.Write(p) }
func (d deadlineResponse) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// idleReader reads an upload body with a read deadline renewed before every read, so that a
// body that goes quiet for UploadIdleTimeout fails the upload (which then leaves nothing).
type idleReader struct {
	r     io.Reader
	rc    *http.ResponseController
	idle  time.Duration
	idled atomic.Bool // a read failed on the idle deadline
	rate  *rateBody   // the body's minimum rate (the router's), or nil
}

func (s *Server) idleBody(w http.ResponseWriter, r *http.Request) (*idleReader, func()) {
	ir := &idleReader{r: r.Body, rc: http.NewResponseController(w), idle: s.cfg.UploadIdleTimeout}
	ir.rate, _ = r.Body.(*rateBody)
	return ir, func() { _ = ir.rc.SetReadDeadline(time.Time{}) }
}

// Read implements io.Reader.
func (i *idleReader) Read(p []byte) (int, error) {
	_ = i.rc.SetReadDeadline(time.Now().Add(i.idle))
	n, err := i.r.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		i.idled.Store(true)
	}
	return n, err
}

// err reports an upload that failed because its body fell below the minimum rate or went idle (the server then also cancels
// the request's context, so the operation's own error says only "canceled"), or err.
func (i *idleReader) err(err error) error {
	if err == nil {
		return nil
	}
	if i.rate != nil {
		if slow := i.rate.tooSlow(); slow != nil {
			return bodyTooSlow(slow, "; nothing was written")
		}
	}
	if i.idled.Load() {
		return &httpError{status: http.StatusRequestTimeout, detail: fmt.Sprintf("upload body sent nothing for %v (upload_idle_timeout); nothing was written", i.idle), err: err}
	}
	return err
}

// budgetCtx bounds a wait for a budget by BudgetWait (and by the request's own deadline).
func (s *Server) budgetCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.BudgetWait)
}

// errBusy is the answer when a budget stayed exhausted: 503 with Retry-After.
func errBusy(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	e := errStatus(http.StatusServiceUnavailable, "%s: the server is at its configured limit; retry later", what)
	if errors.Is(err, slot.ErrShare) {
		e = errStatus(http.StatusServiceUnavailable, "%s: your requests hold your whole share (per user); retry when one has finished", what)
	}
	e.retryAfter = 5
	e.err = err
	return e
}

// writeJSONNow writes v as writeJSON does, with its Content-Length, and flushes it: the client
// has the whole answer while the handler still cleans up (gives its SSH channels back), instead
// of once the handler returns.
func writeJSONNow(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // as writeJSON
	_ = enc.Encode(v)        // as writeJSON: the plain structs it is given always encode
	b := buf.Bytes()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	if _, err := w.Write(b); err != nil {
		return // the client is gone, or the audit refused: nothing to push
	}
	_ = http.NewResponseController(w).Flush()
}
