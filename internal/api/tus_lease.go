package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// errLeaseLost ends a PATCH that no longer holds its upload's lease.
var errLeaseLost = errors.New("the upload's lease was lost: another request may be writing it")

// leaseLost is the answer of a PATCH that lost its upload's lease: 423, as for a PATCH refused
// while another holds it, for the client to ask the offset with HEAD and go on.
func leaseLost(id, why string) error {
	return &httpError{status: http.StatusLocked, detail: fmt.Sprintf("upload %s: %s; ask the offset with HEAD and go on", id, why), err: errLeaseLost}
}

// uploadLease keeps a PATCH's lease on an upload for as long as the PATCH runs, however slowly
// its body arrives: the lease (http.tus_lease) only has to outlive a stalled instance, not the
// slowest chunk a client may send. Without renewal it lapsed after TusLease without a committed
// chunk (a client sending a MiB in more than 30 s), another request took the upload over, and
// the first then wrote its chunk over what the other had committed, or into the file the other
// had finished.
//
// It renews the lease every third of TusLease, and Held reports whether a write may still start:
// not once the lease is lost (renewal refused: another holds it, or the upload is gone), nor
// once a renewal has not succeeded for two thirds of TusLease (the database unreachable from
// here while others may reach it), so every write starts with at least a third of TusLease left
// on the lease. Context is canceled then too, so that the finish does not rename.
type uploadLease struct {
	s      *Server
	p      store.LeaseUploadParams // Owner, ID, Token
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	until time.Time // the lease's end as last set by this holder
	lost  error
}

// keepUploadLease starts renewing lp's lease (just taken, until lp.Until) until Stop. ctx is
// the request's; the lease's Context ends with it or with the lease.
func (s *Server) keepUploadLease(ctx context.Context, lp *store.LeaseUploadParams) *uploadLease {
	l := &uploadLease{s: s, p: store.LeaseUploadParams{Owner: lp.Owner, ID: lp.ID, Token: lp.Token}, until: lp.Until,
		stop: make(chan struct{}), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	every := max(s.cfg.TusLease/3, time.Millisecond)
	go func() { // owned by l: Stop ends it and waits
		defer close(l.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			if l.Held() != nil {
				return
			}
			until := time.Now().Add(s.cfg.TusLease)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), every)
			p := l.p
			p.Until = until
			err := s.deps.Store.RenewUpload(rctx, &p)
			cancel()
			switch {
			case err == nil:
				l.Extended(until)
			case errors.Is(err, store.ErrLocked):
				l.fail(leaseLost(l.p.ID, "another request took the upload over"))
				return
			default:
				s.log.Warn("renewing a resumable upload's lease", "upload", l.p.ID, "err", err)
			}
		}
	}()
	return l
}

// Context is the request's context, also canceled once the lease is lost.
func (l *uploadLease) Context() context.Context { return l.ctx }

// Extended records that the lease now runs until until (a commit renewed it).
func (l *uploadLease) Extended(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.until) {
		l.until = until
	}
}

// Held returns nil while a write may start: the lease is held with at least a third of TusLease
// left.
func (l *uploadLease) Held() error {
	l.mu.Lock()
	lost, until := l.lost, l.until
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	if time.Until(until) < l.s.cfg.TusLease/3 {
		err := leaseLost(l.p.ID, "its lease could not be renewed in time")
		l.fail(err)
		return err
	}
	return nil
}

// Lost records that a commit found the lease held by another (err wraps store.ErrLocked) and
// returns the PATCH's answer.
func (l *uploadLease) Lost(err error) error {
	e := leaseLost(l.p.ID, "another request took the upload over")
	l.fail(e)
	return fmt.Errorf("%w (%w)", e, err)
}

// fail marks the lease lost with err and cancels its context.
func (l *uploadLease) fail(err error) {
	l.mu.Lock()
	if l.lost == nil {
		l.lost = err
	}
	l.mu.Unlock()
	l.cancel(err)
}

// Stop ends the renewals and waits for the one under way, if any. It may be called more than
// once. The lease itself is the caller's to release.
func (l *uploadLease) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	l.cancel(context.Canceled)
}
