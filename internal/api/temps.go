package api

import (
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/store"
)

// maxForgetQueue bounds the gone names waiting to be forgotten in the next batch; beyond it a
// record is left to lapse, and the sweep finds its name already gone (one SFTP round trip).
const maxForgetQueue = 10_000

// TempKeeper keeps this instance's records of the temporary names requests write on systems
// (store.TempStore, files.Temps): an upload's part file, an archive being built, an extraction
// directory. A request records a name before it creates it (the record is committed first, so
// no name exists without one). While requests run, the keeper renews their records' leases
// every third of Config.TempLease in one statement; names reported gone are forgotten in
// batches. A record whose lease lapsed belongs to a request that ended without removing its
// name — its instance was killed, or its SSH connection was lost so the removal could not be
// sent — and the sweep, on any instance, claims it (one instance per record) and removes the
// name with the system owner's credential, confined to the system's root like every file
// operation; a system that is gone forgets the record, one that cannot be reached keeps it for
// a later sweep. Only temporary names (files.IsTempName) are ever removed.
//
// What others may do meanwhile: a name is random (64 bits) and recorded before it exists, so no
// one can place something under it in advance. Once a request failed, a grantee with write
// access may see the name and replace it or its directory. The removal then still stays inside
// the system's root (the directory is resolved confined, following links only within the root),
// removes a link itself rather than its target, and removes only that exact name: at worst
// something the grantee could have removed themselves.
type TempKeeper struct {
	s     *Server
	lease time.Duration

	mu     sync.Mutex
	live   map[string]struct{} // records of names requests are still writing
	forget []string            // records of names gone, to delete
	stop   context.CancelFunc
	done   chan struct{}
}

func newTempKeeper(s *Server) *TempKeeper {
	return &TempKeeper{s: s, lease: s.cfg.TempLease, live: map[string]struct{}{}}
}

// Temps returns the server's keeper of temporary-name records, for its owner to Start and Stop.
func (s *Server) Temps() *TempKeeper { return s.temps }

// Start renews, forgets and sweeps in the background until Stop.
func (k *TempKeeper) Start(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stop != nil {
		return
	}
	ctx, k.stop = context.WithCancel(context.WithoutCancel(ctx))
	k.done = make(chan struct{})
	go func() {
		defer close(k.done)
		t := time.NewTicker(k.lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				k.flush(context.WithoutCancel(ctx))
				return
			case <-t.C:
			}
			if err := k.flush(ctx); err != nil && ctx.Err() == nil {
				k.s.log.Warn("renewing temporary-name records", "err", err)
			}
			if _, err := k.Sweep(ctx); err != nil && ctx.Err() == nil {
				k.s.log.Warn("sweeping temporary names left behind", "err", err)
			}
		}
	}()
}

// Stop ends the background work (forgetting what is gone once more) and waits for it.
func (k *TempKeeper) Stop() {
	k.mu.Lock()
	stop, done := k.stop, k.done
	k.stop = nil
	k.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// flush renews the live records' leases and forgets the gone ones.
func (k *TempKeeper) flush(ctx context.Context) error {
	k.mu.Lock()
	live := slices.Collect(maps.Keys(k.live))
	forget := k.forget
	k.forget = nil
	k.mu.Unlock()
	var errs []error
	if len(live) > 0 {
		errs = append(errs, k.s.deps.Store.RenewTemps(ctx, live, time.Now().Add(k.lease)))
	}
	if len(forget) > 0 {
		if err := k.s.deps.Store.ForgetTemps(ctx, forget); err != nil {
			errs = append(errs, err) // the records lapse and the sweep finds their names gone
		}
	}
	return errors.Join(errs...)
}

// Sweep claims up to 100 records whose lease lapsed and removes their names; it returns how
// many records it settled.
func (k *TempKeeper) Sweep(ctx context.Context) (int, error) {
	now := time.Now()
	temps, err := k.s.deps.Store.ClaimTemps(ctx, now, now.Add(k.lease), 100)
	if err != nil {
		return 0, err
	}
	var done []string
	var errs []error
	for _, t := range temps {
		err := k.remove(ctx, &t)
		switch {
		case err == nil, errors.Is(err, store.ErrNotFound):
			done = append(done, t.ID)
			k.s.log.Info("removed a temporary name left behind", "system", t.SystemOwner+":"+t.SystemID, "dir", t.Dir, "name", t.Name)
		default:
			errs = append(errs, err) // claimed until its new lease lapses, then tried again
		}
	}
	if len(done) > 0 {
		errs = append(errs, k.s.deps.Store.ForgetTemps(ctx, done))
	}
	return len(done), errors.Join(errs...)
}

// remove removes t's name as the system's owner.
func (k *TempKeeper) remove(ctx context.Context, t *store.TempFile) error {
	return k.s.asSystemOwner(ctx, t.SystemOwner, t.SystemID, t.Dir, func(fsys *files.FS) error {
		return fsys.RemoveTemp(ctx, t.Dir, t.Name)
	})
}

// asSystemOwner runs fn on an FS of system owner:id as its owner, with write access to p
// decided as for any request (a system gone or disabled is the decision's error), on a pooled
// SFTP channel. The sweepers use it for what a request left behind.
func (s *Server) asSystemOwner(ctx context.Context, owner, id, p string, fn func(*files.FS) error) error {
	d, err := s.access.Resolve(ctx, access.Request{Caller: auth.Principal{User: owner}, System: id,
		Level: access.Write, Paths: []string{p}})
	if err != nil {
		return err
	}
	lease, err := s.deps.Pool.SFTP(ctx, d.Target)
	if err != nil {
		return err
	}
	err = fn(files.New(lease.Client, command.Exec{Pool: s.deps.Pool, Target: d.Target}, files.Options{RootDir: d.System.RootDir}))
	lease.Done(err)
	return err
}

// forRequest returns the files.Temps of one request on the system d decided, and the function
// to call when the request is over.
func (k *TempKeeper) forRequest(d *access.Decision) (*requestTemps, func()) {
	r := &requestTemps{k: k, owner: d.System.Owner, system: d.System.ID, ids: map[string]string{}}
	return r, r.finish
}

// requestTemps implements files.Temps for one request.
type requestTemps struct {
	k             *TempKeeper
	owner, system string

	mu  sync.Mutex
	ids map[string]string // dir + "/" + name → record id
}

// Creating implements files.Temps: the record is committed before it returns.
func (r *requestTemps) Creating(ctx context.Context, dir, name string) error {
	id := rand.Text()
	t := &store.TempFile{ID: id, SystemOwner: r.owner, SystemID: r.system, Dir: dir, Name: name, LeaseUntil: time.Now().Add(r.k.lease)}
	if err := r.k.s.deps.Store.RecordTemp(ctx, t); err != nil {
		return err
	}
	r.mu.Lock()
	r.ids[dir+"/"+name] = id
	r.mu.Unlock()
	r.k.mu.Lock()
	r.k.live[id] = struct{}{}
	r.k.mu.Unlock()
	return nil
}

// Gone implements files.Temps: the record is forgotten with the next batch.
func (r *requestTemps) Gone(dir, name string) {
	r.mu.Lock()
	id, ok := r.ids[dir+"/"+name]
	delete(r.ids, dir+"/"+name)
	r.mu.Unlock()
	if !ok {
		return
	}
	r.k.mu.Lock()
	delete(r.k.live, id)
	if len(r.k.forget) < maxForgetQueue {
		r.k.forget = append(r.k.forget, id)
	}
	r.k.mu.Unlock()
}

// finish stops renewing the records of names the request did not report gone: their leases
// lapse and the sweep removes the names.
func (r *requestTemps) finish() {
	r.mu.Lock()
	ids := slices.Collect(maps.Values(r.ids))
	r.ids = map[string]string{}
	r.mu.Unlock()
	r.k.mu.Lock()
	for _, id := range ids {
		delete(r.k.live, id)
	}
	r.k.mu.Unlock()
}
