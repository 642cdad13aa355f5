package transfer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// reapUploads aborts the recorded uploads that no run will finish: those of finished transfers
// whose run could not abort them (it died, or the server was down), and those older than
// Config.UploadMaxAge whose transfer has no live runner (a later run finds its upload gone and
// starts the file again). Only uploads in transfer_uploads are touched, never one sshapi did
// not start.
func (e *Engine) reapUploads(ctx context.Context) error {
	now := time.Now()
	stale, err := e.db.p.UploadsStale(ctx, &UploadsStaleParams{Now: now, Before: now.Add(-e.cfg.UploadMaxAge), Limit: 100})
	if err != nil {
		return err
	}
	for _, u := range stale {
		if err := e.reapUpload(ctx, u); err != nil {
			e.log.Warn("transfer reaper: aborting an upload", "id", u.TransferID, "file", u.Dst, "err", err)
			continue
		}
		e.log.Info("transfer reaper: aborted an abandoned upload", "id", u.TransferID, "file", u.Dst)
	}
	return nil
}

// reapUpload aborts one stale upload through its transfer's destination system. It resolves the
// system without judging the path (as the cleanup of a canceled transfer does): it only aborts
// what the engine itself started there.
func (e *Engine) reapUpload(ctx context.Context, u StaleUpload) error {
	dst, err := e.resolver.Resolve(ctx, u.Owner, u.DstSystem)
	if errors.Is(err, ErrSystem) {
		// The system is gone or has no credential: nothing can reach the upload any more (a
		// bucket's lifecycle rule for incomplete uploads is the only cleaner left).
		e.log.Warn("transfer reaper: the destination system is unusable; forgetting its upload", "id", u.TransferID, "file", u.Dst, "err", err)
		return e.db.deleteUpload(ctx, u.TransferID, u.Seq)
	}
	if err != nil {
		return fmt.Errorf("resolve destination: %w", err)
	}
	ep, err := e.openEndpoint(ctx, dst, 1)
	if err != nil {
		return err
	}
	defer ep.close()
	return e.abortUpload(ctx, ep.backend(0), u.TransferID, u.Seq, u.Dst, u.UploadID)
}

// abortTransferUploads aborts every recorded upload of t (canceled with no run working on it).
func (e *Engine) abortTransferUploads(ctx context.Context, t *Transfer) error {
	ups, err := e.db.uploads(ctx, t.ID)
	if err != nil || len(ups) == 0 {
		return err
	}
	dst, err := e.resolver.Resolve(ctx, t.Owner, t.Destination.System)
	if err != nil {
		return fmt.Errorf("resolve destination: %w", err)
	}
	ep, err := e.openEndpoint(ctx, dst, 1)
	if err != nil {
		return err
	}
	defer ep.close()
	for _, u := range ups {
		if err := e.abortUpload(ctx, ep.backend(0), t.ID, u.Seq, u.Dst, u.UploadID); err != nil {
			return err
		}
	}
	return nil
}
