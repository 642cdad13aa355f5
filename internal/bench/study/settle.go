package study

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// A section measured right after the load study's hundreds of sessions used to start while
// their processes were still winding down (a 1-minute load average of 30 on a 2-core machine
// when the transfer runs began). Each throughput section now first waits for the machine to be
// quiet: no more runnable tasks than CPUs for settleQuiet in a row, or settleMax at most.

const (
	settleQuiet = 2 * time.Second
	settlePoll  = 250 * time.Millisecond
)

// settleMax is the longest settle waits; the package's tests shorten it (they measure nothing
// and must not wait minutes on a busy CI machine).
var settleMax = 2 * time.Minute

// settle waits until the machine is quiet (see above) and returns a note saying how long it
// waited and whether it got quiet.
func settle(ctx context.Context) string {
	q := waitQuiet(ctx, settleMax)
	switch {
	case q.unread:
		return "the machine's runnable tasks could not be read (/proc/loadavg); the section did not wait for quiet"
	case q.cut:
		return "the wait for a quiet machine was cut short"
	case !q.quiet:
		return fmt.Sprintf("the machine did not get quiet within %s (%d runnable tasks on %d CPUs); the section ran anyway", settleMax, q.runnable, runtime.NumCPU())
	}
	return fmt.Sprintf("waited %.1f s before the section for the machine to be quiet (at most %d runnable tasks, one per CPU, for %s)",
		q.waited.Seconds(), runtime.NumCPU(), settleQuiet)
}

// quietness is what one wait for a quiet machine saw.
type quietness struct {
	waited   time.Duration
	quiet    bool // quiet for settleQuiet within the limit
	runnable int  // runnable tasks at the last reading
	unread   bool // /proc/loadavg could not be read (nothing was waited for)
	cut      bool // ctx ended first
}

// waitQuiet waits until the machine is quiet, limit at most.
func waitQuiet(ctx context.Context, limit time.Duration) quietness {
	start := time.Now()
	cpus := runtime.NumCPU()
	var quietSince time.Time
	for {
		n, ok := runnable()
		now := time.Now()
		q := quietness{waited: now.Sub(start), runnable: n}
		switch {
		case !ok:
			q.unread = true
			return q
		case n > cpus:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = now
		case now.Sub(quietSince) >= settleQuiet:
			q.quiet = true
			return q
		}
		if now.Sub(start) >= limit {
			return q
		}
		select {
		case <-ctx.Done():
			q.cut = true
			return q
		case <-time.After(settlePoll):
		}
	}
}

// runnable returns the number of runnable tasks /proc/loadavg reports (its fourth field,
// "running/total"), this process's reading thread included.
func runnable() (int, bool) { return parseRunnable(readLoadavg()) }

// parseRunnable reads the running count of a /proc/loadavg line such as
// "0.36 6.34 7.96 2/345 1234".
func parseRunnable(s string) (int, bool) {
	f := strings.Fields(s)
	if len(f) < 4 {
		return 0, false
	}
	r, _, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(r)
	return n, err == nil && n >= 0
}
