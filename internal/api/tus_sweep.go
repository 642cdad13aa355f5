package api

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/store"
)

// UploadSweeper removes expired resumable uploads: their part files (through the system
// owner's credential, confined like every file operation) and their rows. Any number of
// instances may sweep at once: an upload is taken with its lease first.
type UploadSweeper struct {
	s     *Server
	every time.Duration

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// UploadSweeper returns a sweeper that runs every interval (0: a minute) once started.
func (s *Server) UploadSweeper(every time.Duration) *UploadSweeper {
	if every <= 0 {
		every = time.Minute
	}
	return &UploadSweeper{s: s, every: every}
}

// Start sweeps in the background until Stop.
func (w *UploadSweeper) Start(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop != nil {
		return
	}
	ctx, w.stop = context.WithCancel(context.WithoutCancel(ctx))
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.every)
		defer t.Stop()
		for {
			if _, err := w.Sweep(ctx); err != nil && ctx.Err() == nil {
				w.s.log.Warn("sweeping expired uploads", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the background sweep and waits for it.
func (w *UploadSweeper) Stop() {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.stop = nil
	w.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// sweepBatch is how many expired uploads one Sweep takes.
const sweepBatch = 100

// Sweep removes the uploads expired by now (up to sweepBatch per call) and returns how many
// went. An upload whose part file cannot be reached now (system unreachable or disabled) stays
// for a later sweep: it keeps the sweep's lease for retryAfter, so the sweeps in between take
// other uploads, and uploads that failed before come after those never tried. Once one upload
// of a system failed, the system's other uploads in the batch are put off the same way without
// trying, so one unreachable system costs a sweep one pool deadline, not one per upload. (A
// failed removal used to give the lease back: the same oldest uploads, one user's on one dead
// system, filled every batch and took a pool deadline each, and nobody else's were swept.) One
// whose system is gone is forgotten.
func (w *UploadSweeper) Sweep(ctx context.Context) (int, error) {
	ups, err := w.s.deps.Store.ExpiredUploads(ctx, time.Now(), sweepBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	failed := map[[2]string]bool{} // systems (owner, id) whose removal failed in this sweep
	for _, u := range ups {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		now := time.Now()
		token := "sweep:" + rand.Text()
		sys := [2]string{u.SystemOwner, u.SystemID}
		until := now.Add(w.s.cfg.TusLease)
		if failed[sys] {
			until = now.Add(w.retryAfter())
		}
		if _, err := w.s.deps.Store.LeaseUpload(ctx, &store.LeaseUploadParams{Owner: u.Owner, ID: u.ID, Token: token, Now: now,
			Until: until}); err != nil {
			if !errors.Is(err, store.ErrLocked) && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, err)
			}
			continue
		}
		if failed[sys] {
			continue // put off with the lease just taken
		}
		if err := w.removePart(ctx, &u); err != nil && !errors.Is(err, store.ErrNotFound) {
			failed[sys] = true
			if rerr := w.s.deps.Store.RenewUpload(context.WithoutCancel(ctx), &store.LeaseUploadParams{Owner: u.Owner, ID: u.ID, Token: token,
				Until: time.Now().Add(w.retryAfter())}); rerr != nil {
				errs = append(errs, rerr)
			}
			errs = append(errs, err)
			continue
		}
		if err := w.s.deps.Store.DeleteUpload(ctx, u.Owner, u.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// retryAfter is how long an upload whose part file could not be removed waits for another try:
// ten sweeps, and at least a lease.
func (w *UploadSweeper) retryAfter() time.Duration {
	return max(10*w.every, w.s.cfg.TusLease)
}

// removePart removes u's part file as the system's owner.
func (w *UploadSweeper) removePart(ctx context.Context, u *store.Upload) error {
	return w.s.asSystemOwner(ctx, u.SystemOwner, u.SystemID, u.Dest, func(fsys *files.FS) error {
		return fsys.RemoveResumable(ctx, u.Dest, u.PartName)
	})
}
