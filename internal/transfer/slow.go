package transfer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/sshpool"
)

// errTooSlow ends a run whose data moved slower than Config.MinRate over MinRateWindow.
var errTooSlow = errors.New("throughput below the minimum rate")

// errSlowRequeue tells the worker that a too-slow run saved its progress and went back to the
// queue, to be retried on new channels after a pause.
var errSlowRequeue = errors.New("too slow; re-queued")

// rateSample is the data one heartbeat interval moved while ranges were being copied.
type rateSample struct {
	dt    time.Duration
	bytes int64
}

// slowWatch measures the throughput of a run over its last MinRateWindow of copying. Intervals in
// which nothing was being copied (planning, sha256sum, renames) do not count.
type slowWatch struct {
	at      time.Time
	bytes   int64
	samples []rateSample
	total   rateSample

	mu     sync.Mutex
	leases map[*sshpool.SFTPLease]bool // the run's open channels, to abort when too slow
}

// trackLease records (open) or forgets an SFTP lease of the run's streams.
func (r *run) trackLease(l *sshpool.SFTPLease, open bool) {
	if l == nil {
		return
	}
	w := &r.slow
	w.mu.Lock()
	defer w.mu.Unlock()
	if !open {
		delete(w.leases, l)
		return
	}
	if w.leases == nil {
		w.leases = map[*sshpool.SFTPLease]bool{}
	}
	w.leases[l] = true
}

// abortLeases closes the connections under the run's channels, so that reads and writes stuck
// behind a slow peer return now and the next run dials new connections.
func (r *run) abortLeases() {
	w := &r.slow
	w.mu.Lock()
	ls := make([]*sshpool.SFTPLease, 0, len(w.leases))
	for l := range w.leases {
		ls = append(ls, l)
	}
	clear(w.leases)
	w.mu.Unlock()
	for _, l := range ls {
		l.Abort()
	}
}

// checkRate is called on every heartbeat; it cancels the run with errTooSlow when the data that
// moved while copying over the last MinRateWindow averages less than MinRate bytes/s.
func (r *run) checkRate(now time.Time) {
	cfg := r.e.cfg
	if cfg.MinRate <= 0 {
		return
	}
	w := &r.slow
	bytes := r.bytesRead.Load()
	copying := r.copying.Load() > 0
	if !w.at.IsZero() && copying {
		s := rateSample{dt: now.Sub(w.at), bytes: bytes - w.bytes}
		w.samples = append(w.samples, s)
		w.total.dt += s.dt
		w.total.bytes += s.bytes
		for len(w.samples) > 1 && w.total.dt-w.samples[0].dt >= cfg.MinRateWindow {
			w.total.dt -= w.samples[0].dt
			w.total.bytes -= w.samples[0].bytes
			w.samples = w.samples[1:]
		}
		if w.total.dt >= cfg.MinRateWindow {
			rate := float64(w.total.bytes) / w.total.dt.Seconds()
			if rate < cfg.MinRate {
				r.cancel(fmt.Errorf("%w: %.0f bytes/s over the last %s of copying (minimum %.0f bytes/s)",
					errTooSlow, rate, w.total.dt.Round(time.Second), cfg.MinRate))
				r.abortLeases()
			}
		}
	}
	w.at, w.bytes = now, bytes
}

// concludeSlow ends a run that was too slow: it goes back to the queue (progress kept) up to
// SlowRetries times, then the transfer fails. The count of slow runs lives in the transfer's
// row, so a restarted engine or another instance continues it rather than starting again at 0.
func (r *run) concludeSlow(ctx context.Context, cause error, now time.Time, fail func(string) error) error {
	e := r.e
	n, err := e.db.slowRun(ctx, r.t.ID, e.instance)
	if errors.Is(err, ErrNotFound) {
		e.metrics.runs.WithLabelValues("lease_lost").Inc()
		return nil
	}
	if err != nil {
		return dbe(err)
	}
	if n > e.cfg.SlowRetries {
		return fail(fmt.Sprintf("%s (re-queued %d times for being slow)", cause, n-1))
	}
	e.metrics.runs.WithLabelValues("too_slow").Inc()
	e.log.Info("transfer too slow; re-queued to retry on new channels", "id", r.t.ID, "slow_runs", n, "err", cause)
	if err := e.db.finish(ctx, r.t.ID, e.instance, StatusQueued, "", r.progress(), now); err != nil {
		return err
	}
	r.setLastErr(cause)
	return errSlowRequeue
}
