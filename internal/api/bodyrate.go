package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// errBodyTooSlow is wrapped by the read error of a request body that fell below
// Config.MinBodyRate.
var errBodyTooSlow = errors.New("request body too slow")

// rateBody cuts off a request body that arrives slower than a minimum rate, so that a client
// trickling a byte a minute cannot hold a request (and its memory, channel or upload slot)
// forever. Only time spent waiting inside Read counts: while the handler is busy elsewhere (an
// upload waiting on a slow SFTP server) the client is not charged for it.
//
// The allowance is kept in seconds of waiting: it starts at the grace period, each read spends
// the time it waited and earns len/rate seconds, and it never holds more than one window, so
// a pause longer than the window (after any amount of fast data) is cut as well. Each read
// runs under a connection read deadline at the end of the allowance (or of maxIdle, if
// sooner), so a stalled read returns when the allowance is gone rather than when the next
// byte comes.
type rateBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	rate    float64       // bytes per second
	window  time.Duration // most allowance that can be banked
	maxIdle time.Duration // longest single wait, whatever the allowance (0: the window)

	mu     sync.Mutex
	credit time.Duration
	slow   error // set once the body fell below the rate
}

// limitBodyRate wraps r.Body with the minimum rate of the configuration (nothing when it is
// disabled or the request has no body). maxIdle, when positive, also bounds each wait.
func (s *Server) limitBodyRate(w http.ResponseWriter, r *http.Request, maxIdle time.Duration) {
	if s.cfg.MinBodyRate <= 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	r.Body = &rateBody{ReadCloser: r.Body, rc: http.NewResponseController(w), rate: float64(s.cfg.MinBodyRate),
		window: s.cfg.MinBodyRateWindow, maxIdle: maxIdle, credit: s.cfg.MinBodyRateGrace}
}

// Read implements io.Reader.
func (b *rateBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slow != nil {
		return 0, b.slow
	}
	start := time.Now()
	wait, idle := b.credit, b.window
	if b.maxIdle > 0 {
		idle = b.maxIdle
	}
	byRate := wait <= idle
	wait = min(wait, idle)
	_ = b.rc.SetReadDeadline(start.Add(wait))
	n, err := b.ReadCloser.Read(p)
	took := time.Since(start)
	b.credit = min(b.credit-took+time.Duration(float64(n)/b.rate*float64(time.Second)), b.window)
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded) && byRate:
		b.slow = fmt.Errorf("%w: it arrived slower than %d bytes/s over %s (http.min_body_rate, http.min_body_rate_window)",
			errBodyTooSlow, int64(b.rate), b.window)
		return n, b.slow
	case err != nil:
		// The body ended or failed: nothing after it (net/http's watch for a closed connection)
		// may inherit the deadline. A deadline that fired stays, so the connection is dropped.
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}

// tooSlow returns the error of a body that fell below the minimum rate, or nil.
func (b *rateBody) tooSlow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.slow
}

// bodyTooSlow is the 408 answer for a body cut off by its rate; suffix says what became of
// the request ("; nothing was written").
func bodyTooSlow(err error, suffix string) error {
	return &httpError{status: http.StatusRequestTimeout, detail: err.Error() + suffix}
}
