package bench

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Runner runs scenarios against Targets and appends every run's Summary to Report.
type Runner struct {
	Targets *Targets
	Report  *Report
	// Timeout bounds each request (default 30s); Drain is how long outstanding requests may
	// finish after a rate run's duration (default 10s).
	Timeout, Drain time.Duration
	// MaxInFlight caps outstanding requests per run (0 = no cap).
	MaxInFlight int
	// Warmup requests (8 at a time, unmeasured) precede each target's first run of a command, so
	// pools are open before measuring. 0 disables.
	Warmup int
	// Pause between runs lets the server settle (default 1s; three times as long after a run
	// with failures, whose abandoned connections the server may still be tearing down).
	Pause time.Duration
	// Progress receives one line per second during runs and one per finished run; nil = quiet.
	Progress io.Writer
	// Labels names a command in the report and the progress lines when it should not appear as
	// run (the study lists a per-run directory under a name that is the same in every run); a
	// command without an entry is its own label.
	Labels map[string]string

	warmed map[string]bool
}

// label is how command appears in the report.
func (r *Runner) label(command string) string {
	if l, ok := r.Labels[command]; ok {
		return l
	}
	return command
}

func (r *Runner) defaults() {
	if r.Timeout <= 0 {
		r.Timeout = 30 * time.Second
	}
	if r.Drain <= 0 {
		r.Drain = 10 * time.Second
	}
	if r.Pause <= 0 {
		r.Pause = time.Second
	}
	if r.warmed == nil {
		r.warmed = map[string]bool{}
	}
}

func (r *Runner) logf(format string, args ...any) {
	if r.Progress != nil {
		fmt.Fprintf(r.Progress, format+"\n", args...)
	}
}

func (r *Runner) pause(ctx context.Context) error {
	d := r.Pause
	if n := len(r.Report.Runs); n > 0 && r.Report.Runs[n-1].Failed > 0 {
		d *= 3
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bench: %w", ctx.Err())
	}
}

func (r *Runner) warm(ctx context.Context, target, command string, op Op) error {
	key := target + "\x00" + command
	if r.Warmup <= 0 || r.warmed[key] {
		return nil
	}
	r.warmed[key] = true
	sem := make(chan struct{}, 8)
	errs := make(chan error, r.Warmup)
	for range r.Warmup {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			wctx, cancel := context.WithTimeout(ctx, r.Timeout)
			defer cancel()
			errs <- op(wctx)
		}()
	}
	var first error
	for range r.Warmup {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		r.logf("[%s] warm-up: %v", target, first)
	}
	return nil
}

func (r *Runner) progress(label string, total time.Duration) func(Progress) {
	if r.Progress == nil {
		return nil
	}
	return func(p Progress) {
		fmt.Fprintf(r.Progress, "[%s] %4.0fs/%.0fs sent %d done %d in flight %d errors %d\n",
			label, p.Elapsed.Seconds(), total.Seconds(), p.Scheduled, p.Done, p.InFlight, p.Errors)
	}
}

func (r *Runner) add(label string, s Summary) {
	r.Report.Runs = append(r.Report.Runs, s)
	r.logf("[%s] done: ok %d failed %d achieved %.1f/s p50 %s p99 %s max %s ms; errors %s",
		label, s.OK, s.Failed, s.AchievedRate, ms(s.Latency.P50, s.OK), ms(s.Latency.P99, s.OK), ms(s.Latency.Max, s.OK), errorList(s))
}

// Commands runs command at each rate for duration against every target, targets interleaved
// per rate so that slow drift of the machine affects all alike.
func (r *Runner) Commands(ctx context.Context, command string, rates []float64, duration time.Duration) error {
	r.defaults()
	for _, rate := range rates {
		for _, target := range r.Targets.Names() {
			op, err := r.Targets.CommandOp(target, command)
			if err != nil {
				return err
			}
			if err := r.warm(ctx, target, command, op); err != nil {
				return err
			}
			label := fmt.Sprintf("%s %q %g/s", target, r.label(command), rate)
			rec, err := Run(ctx, Plan{Rate: rate, Duration: duration, MaxInFlight: r.MaxInFlight, Timeout: r.Timeout,
				Drain: r.Drain, Progress: r.progress(label, duration)}, op)
			if err != nil {
				return err
			}
			s := rec.Summary()
			s.Target, s.Scenario, s.Command, s.Rate, s.DurationS = target, ScenarioCommands, r.label(command), rate, duration.Seconds()
			r.add(label, s)
			if err := r.pause(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// Burst sends n copies of command at once through every target and records the time until all
// finished.
func (r *Runner) Burst(ctx context.Context, command string, n int) error {
	r.defaults()
	for _, target := range r.Targets.Names() {
		op, err := r.Targets.CommandOp(target, command)
		if err != nil {
			return err
		}
		if err := r.warm(ctx, target, command, op); err != nil {
			return err
		}
		label := fmt.Sprintf("%s burst %d %q", target, n, r.label(command))
		r.logf("[%s] sending", label)
		rec, err := Burst(ctx, n, r.Timeout, op)
		if err != nil {
			return err
		}
		s := rec.Summary()
		s.Target, s.Scenario, s.Command = target, ScenarioBurst, r.label(command)
		r.add(label, s)
		if err := r.pause(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Sessions establishes n fresh authenticated SSH connections at once through every target that
// can (see Targets.ConnectOp) and records the time until all were done.
func (r *Runner) Sessions(ctx context.Context, n int) error {
	r.defaults()
	for _, target := range r.Targets.Names() {
		op := r.Targets.ConnectOp(target)
		if op == nil {
			r.logf("[%s] sessions: not applicable (reuses its master connections)", target)
			continue
		}
		label := fmt.Sprintf("%s sessions %d", target, n)
		r.logf("[%s] connecting", label)
		rec, err := Burst(ctx, n, r.Timeout, op)
		if err != nil {
			return err
		}
		s := rec.Summary()
		s.Target, s.Scenario = target, ScenarioSessions
		r.add(label, s)
		if err := r.pause(ctx); err != nil {
			return err
		}
	}
	return nil
}
