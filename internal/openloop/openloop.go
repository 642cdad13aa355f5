package openloop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Op performs one request. It must honour ctx and return nil on success.
type Op func(ctx context.Context) error

// Plan describes one open-loop run: requests are scheduled at a constant rate for a duration,
// whatever the target does. A request's latency is measured from the time it was scheduled, not
// from the time it could be sent, so waiting for an in-flight slot or for a slow scheduler counts
// against the target (no coordinated omission).
type Plan struct {
	// Rate is the offered arrival rate in requests per second (> 0).
	Rate float64
	// Duration is how long requests are scheduled for; Rate×Duration requests in all.
	Duration time.Duration
	// MaxInFlight caps requests outstanding at once (0 = no cap). Requests that find no free slot
	// wait, and their wait counts in their latency.
	MaxInFlight int
	// Timeout bounds each request from its send (default 30s).
	Timeout time.Duration
	// Drain is how long after Duration outstanding requests may still finish (default 10s).
	// Requests still waiting for a slot then count as ErrNotSent, running ones as timeouts.
	Drain time.Duration
	// Progress, if set, is called about once a second with the run's state, and once at the end.
	Progress func(Progress)
}

// Progress is a snapshot of a running plan.
type Progress struct {
	Elapsed   time.Duration
	Scheduled int
	Done      int
	InFlight  int
	Errors    int
}

func (p *Plan) defaults() error {
	if p.Rate <= 0 {
		return fmt.Errorf("rate must be positive, got %v", p.Rate)
	}
	if p.Duration <= 0 {
		return fmt.Errorf("duration must be positive, got %v", p.Duration)
	}
	if p.MaxInFlight < 0 {
		return fmt.Errorf("max in-flight must not be negative, got %d", p.MaxInFlight)
	}
	if p.Timeout <= 0 {
		p.Timeout = 30 * time.Second
	}
	if p.Drain <= 0 {
		p.Drain = 10 * time.Second
	}
	return nil
}

// Count is how many requests the plan schedules.
func (p Plan) Count() int {
	n := int(p.Rate*p.Duration.Seconds() + 0.5)
	return max(n, 1)
}

// Run executes the plan against op and returns what the recorder saw. It returns early, with
// the requests finished so far, when ctx ends. Every goroutine it starts has returned when it
// returns.
func Run(ctx context.Context, plan Plan, op Op) (*Recorder, error) {
	if err := plan.defaults(); err != nil {
		return nil, fmt.Errorf("bench plan: %w", err)
	}
	n := plan.Count()
	interval := time.Duration(float64(time.Second) / plan.Rate)
	start := time.Now()
	return run(ctx, plan, op, n, start, func(i int) time.Time { return start.Add(time.Duration(i) * interval) })
}

// Burst sends n requests at the same instant (each scheduled at the start) and returns what
// the recorder saw; its Wall is the time until the last one finished.
func Burst(ctx context.Context, n int, timeout time.Duration, op Op) (*Recorder, error) {
	if n <= 0 {
		return nil, fmt.Errorf("bench burst: n must be positive, got %d", n)
	}
	plan := Plan{Rate: 1, Duration: time.Nanosecond, Timeout: timeout, Drain: timeout}
	_ = plan.defaults()
	start := time.Now()
	return run(ctx, plan, op, n, start, func(int) time.Time { return start })
}

func run(ctx context.Context, plan Plan, op Op, n int, start time.Time, at func(int) time.Time) (*Recorder, error) {
	rec := NewRecorder(start)
	// runCtx ends at the drain deadline: whatever is outstanding then is given up.
	runCtx, cancel := context.WithDeadline(ctx, start.Add(plan.Duration+plan.Drain))
	defer cancel()

	var slots chan struct{}
	if plan.MaxInFlight > 0 {
		slots = make(chan struct{}, plan.MaxInFlight)
	}
	var wg sync.WaitGroup
	stopProgress := startProgress(plan.Progress, rec, start)
	timer := time.NewTimer(0)
	<-timer.C
	scheduled := 0
loop:
	for i := range n {
		sched := at(i)
		if d := time.Until(sched); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-runCtx.Done():
				break loop
			}
		}
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-runCtx.Done():
				break loop
			}
		}
		scheduled++
		rec.scheduled(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if slots != nil {
				defer func() { <-slots }()
			}
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(runCtx, plan.Timeout)
			err := op(rctx)
			rcancel()
			if err != nil && runCtx.Err() != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
				err = fmt.Errorf("outstanding at the drain deadline: %w", context.DeadlineExceeded)
			}
			rec.Record(sched, sent, time.Now(), err)
		}()
	}
	wg.Wait()
	// Requests never sent because the deadline came first still count: they were offered.
	if ctx.Err() == nil {
		for i := scheduled; i < n; i++ {
			rec.scheduled(1)
			rec.Record(at(i), time.Time{}, time.Now(), ErrNotSent)
		}
	}
	stopProgress()
	if err := ctx.Err(); err != nil {
		return rec, fmt.Errorf("bench run interrupted: %w", err)
	}
	return rec, nil
}

// startProgress reports progress once a second until the returned stop is called; stop waits
// for the reporter to return and then reports once more.
func startProgress(fn func(Progress), rec *Recorder, start time.Time) (stop func()) {
	if fn == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn(rec.progress(time.Since(start)))
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		fn(rec.progress(time.Since(start)))
	}
}
