package transfer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrQuota is returned by Submit when the owner already has Config.MaxQueuedPerOwner unfinished
// transfers.
var ErrQuota = errors.New("too many unfinished transfers")

// errOwnerBusy tells the worker that the owner already runs MaxRunningPerOwner transfers here:
// the job is snoozed, so the transfer stays queued without holding a worker.
var errOwnerBusy = errors.New("the owner's running-transfer limit is reached; snoozed")

// ownerBusySnooze is how long a transfer of an owner at the running limit waits before River
// offers it again (River's scheduler adds up to 5 s).
const ownerBusySnooze = time.Second

// takeOwnerSlot counts one running transfer of owner on this instance, unless the owner is at
// MaxRunningPerOwner.
func (e *Engine) takeOwnerSlot(owner string) (release func(), ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running == nil {
		e.running = map[string]int{}
	}
	if e.running[owner] >= e.cfg.MaxRunningPerOwner {
		return nil, false
	}
	e.running[owner]++
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.running[owner]--; e.running[owner] <= 0 {
			delete(e.running, owner)
		}
	}, true
}

// checkQueueQuota refuses a new transfer for owner who has MaxQueuedPerOwner unfinished ones.
func (e *Engine) checkQueueQuota(ctx context.Context, tx *sql.Tx, owner string) error {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM transfers WHERE owner = ? AND status IN ('queued', 'running')`, owner).Scan(&n)
	if err != nil {
		return fmt.Errorf("count unfinished transfers: %w", err)
	}
	if n >= e.cfg.MaxQueuedPerOwner {
		return fmt.Errorf("%w: %d queued or running (the limit per user is %d); wait for some to finish or cancel them",
			ErrQuota, n, e.cfg.MaxQueuedPerOwner)
	}
	return nil
}
