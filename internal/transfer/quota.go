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

// errOwnerBusy tells the worker that the owner already runs MaxRunningPerOwner transfers (on
// any instance; live leases in the database are counted):
// the job is snoozed, so the transfer stays queued without holding a worker.
var errOwnerBusy = errors.New("the owner's running-transfer limit is reached; snoozed")

// ownerBusySnooze is how long a transfer of an owner at the running limit waits before River
// offers it again (River's scheduler adds up to 5 s).
const ownerBusySnooze = time.Second

// checkQueueQuota refuses a new transfer for owner who has MaxQueuedPerOwner unfinished ones.
func (e *Engine) checkQueueQuota(ctx context.Context, tx *sql.Tx, owner string) error {
	n, err := e.db.countUnfinished(ctx, tx, owner)
	if err != nil {
		return err
	}
	if n >= e.cfg.MaxQueuedPerOwner {
		return fmt.Errorf("%w: %d queued or running (the limit per user is %d); wait for some to finish or cancel them",
			ErrQuota, n, e.cfg.MaxQueuedPerOwner)
	}
	return nil
}
