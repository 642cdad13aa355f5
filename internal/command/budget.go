package command

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/semaphore"
)

// ErrBudget is returned by Budget.Reserve when the server-wide output budget stayed exhausted
// for as long as the caller was willing to wait.
var ErrBudget = errors.New("command output budget exhausted")

// Budget is a server-wide number of bytes that buffered (non-streamed) command output may use
// at once. A buffered command reserves its whole cap (MaxOutput for stdout plus MaxOutput for
// stderr) before it starts, so an admitted command always runs to completion and memory held
// for outputs never exceeds the budget, whatever the requests ask.
type Budget struct {
	total int64
	sem   *semaphore.Weighted
}

// NewBudget returns a budget of total bytes.
func NewBudget(total int64) *Budget {
	return &Budget{total: total, sem: semaphore.NewWeighted(total)}
}

// Total is the budget's size in bytes.
func (b *Budget) Total() int64 { return b.total }

// Reserve waits until n bytes are free or ctx ends. The error wraps ErrBudget when the wait
// ended, or says n can never fit.
func (b *Budget) Reserve(ctx context.Context, n int64) (*Reservation, error) {
	if n > b.total {
		return nil, fmt.Errorf("%w: %d bytes asked, the whole budget is %d", ErrBudget, n, b.total)
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBudget, err)
	}
	return &Reservation{b: b, n: n}, nil
}

// Reservation is bytes taken from a Budget; Release gives them back.
type Reservation struct {
	b    *Budget
	n    int64
	done bool
}

// Shrink gives back all but n bytes of the reservation (when the output turned out smaller
// than its cap).
func (r *Reservation) Shrink(n int64) {
	if r == nil || r.done || n >= r.n {
		return
	}
	r.b.sem.Release(r.n - max(n, 0))
	r.n = max(n, 0)
}

// Release returns the reservation to its budget; later calls do nothing.
func (r *Reservation) Release() {
	if r == nil || r.done {
		return
	}
	r.done = true
	r.b.sem.Release(r.n)
}
