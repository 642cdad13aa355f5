package command

import (
	"context"
	"errors"
	"fmt"

	"github.com/sshapi/sshapi/internal/slot"
)

// ErrBudget is returned by Budget.Reserve when the output budget (the server's, or the user's
// share of it: the error then also wraps slot.ErrShare) stayed exhausted for as long as the
// caller was willing to wait.
var ErrBudget = errors.New("command output budget exhausted")

// Budget is a server-wide number of bytes that buffered (non-streamed) command output may use
// at once, with a share per user. A buffered command reserves its whole cap (MaxOutput for
// stdout plus MaxOutput for stderr) before it starts, so an admitted command always runs to
// completion and memory held for outputs never exceeds the budget, whatever the requests ask;
// the share keeps one user's commands, however long they run, from holding all of it.
type Budget struct {
	pool *slot.Pool
}

// NewBudget returns a budget of total bytes of which one user may hold at most perOwner.
func NewBudget(total, perOwner int64) *Budget {
	return &Budget{pool: slot.New(total, perOwner)}
}

// Total is the budget's size in bytes.
func (b *Budget) Total() int64 { return b.pool.Capacity() }

// Reserve waits until n bytes of owner's share and of the budget are free, or ctx ends. The
// error wraps ErrBudget when the wait ended, or says n can never fit.
func (b *Budget) Reserve(ctx context.Context, owner string, n int64) (*Reservation, error) {
	lease, err := b.pool.Acquire(ctx, owner, n)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBudget, err)
	}
	return &Reservation{lease: lease, n: n}, nil
}

// Reservation is bytes taken from a Budget; Release gives them back.
type Reservation struct {
	lease *slot.Lease
	n     int64
}

// Shrink gives back all but n bytes of the reservation (when the output turned out smaller
// than its cap).
func (r *Reservation) Shrink(n int64) {
	if r == nil || n >= r.n {
		return
	}
	r.lease.Shrink(n)
	r.n = max(n, 0)
}

// Release returns the reservation to its budget; later calls do nothing.
func (r *Reservation) Release() {
	if r == nil {
		return
	}
	r.lease.Release()
}
