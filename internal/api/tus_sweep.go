package api

import (
	"context"
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

// Sweep removes the uploads expired by now (up to 100 per call) and returns how many went. An
// upload whose part file cannot be reached now (system unreachable or disabled) stays for the
// next sweep; one whose system is gone is forgotten.
func (w *UploadSweeper) Sweep(ctx context.Context) (int, error) {
	now := time.Now()
	ups, err := w.s.deps.Store.ExpiredUploads(ctx, now, 100)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, u := range ups {
		token := "sweep:" + now.String()
		if _, err := w.s.deps.Store.LeaseUpload(ctx, &store.LeaseUploadParams{Owner: u.Owner, ID: u.ID, Token: token, Now: now,
			Until: now.Add(w.s.cfg.TusLease)}); err != nil {
			if !errors.Is(err, store.ErrLocked) && !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, err)
			}
			continue
		}
		if err := w.removePart(ctx, &u); err != nil && !errors.Is(err, store.ErrNotFound) {
			_ = w.s.deps.Store.ReleaseUpload(ctx, u.Owner, u.ID, token)
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

// removePart removes u's part file as the system's owner.
func (w *UploadSweeper) removePart(ctx context.Context, u *store.Upload) error {
	return w.s.asSystemOwner(ctx, u.SystemOwner, u.SystemID, u.Dest, func(fsys *files.FS) error {
		return fsys.RemoveResumable(ctx, u.Dest, u.PartName)
	})
}
