package api

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/storage/s3"
	"github.com/sshapi/sshapi/internal/store"
)

// maxForgetQueue bounds the gone names waiting to be forgotten in the next batch; beyond it a
// record is left to lapse, and the sweep finds its name already gone (one SFTP round trip).
const maxForgetQueue = 10_000

// TempKeeper keeps this instance's records of the temporary names requests write on systems
// (store.TempStore, files.Temps): an upload's part file, an archive being built, an extraction
// directory; and of the S3 multipart uploads a PUT or POST to a bucket is sending
// (s3.UploadRecorder), recorded right after CreateMultipartUpload answers and before any part
// is sent, which the sweep aborts (with the system owner's credential) once their lease lapses.
// A process killed between CreateMultipartUpload's answer and the record's commit leaves one
// upload unrecorded: that window is one database round trip, and a bucket lifecycle rule
// (AbortIncompleteMultipartUpload) is the backstop for it. A request records a name before it creates it (the record is committed first, so
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

// remove removes t's name as the system's owner, or aborts t's multipart upload.
func (k *TempKeeper) remove(ctx context.Context, t *store.TempFile) error {
	if t.UploadID != "" {
		return k.abortUpload(ctx, t)
	}
	return k.s.asSystemOwner(ctx, t.SystemOwner, t.SystemID, t.Dir, func(fsys *files.FS) error {
		return fsys.RemoveTemp(ctx, t.Dir, t.Name)
	})
}

// abortUpload aborts t's S3 multipart upload with the system owner's credential, after a write
// decision on its path as for any request. An upload already gone (completed or aborted by its
// request after all) is done; so is one whose system is no longer on t's bucket (the record is
// forgotten with a warning: the credential at hand is not that bucket's).
func (k *TempKeeper) abortUpload(ctx context.Context, t *store.TempFile) error {
	d, err := k.s.access.Resolve(ctx, access.Request{Caller: auth.Principal{User: t.SystemOwner}, System: t.SystemID,
		Level: access.Write, Paths: []string{t.Name}})
	if err != nil {
		return err
	}
	if d.Storage == nil || d.System.Bucket != t.Bucket {
		k.s.log.Warn("a multipart upload left behind is on a bucket its system no longer names; not aborted",
			"system", t.SystemOwner+":"+t.SystemID, "bucket", t.Bucket, "path", t.Name, "upload_id", t.UploadID)
		return fmt.Errorf("upload %s on bucket %s: %w", t.UploadID, t.Bucket, store.ErrNotFound)
	}
	up, err := d.Storage.Resume(ctx, t.Name, t.UploadID, nil, storage.UploadOptions{})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return up.Abort(ctx)
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
	r.track(dir+"/"+name, id)
	return nil
}

// track renews record id (of what key names) until untrack or finish.
func (r *requestTemps) track(key, id string) {
	r.mu.Lock()
	r.ids[key] = id
	r.mu.Unlock()
	r.k.mu.Lock()
	r.k.live[id] = struct{}{}
	r.k.mu.Unlock()
}

// Gone implements files.Temps: the record is forgotten with the next batch.
func (r *requestTemps) Gone(dir, name string) { r.untrack(dir + "/" + name) }

// untrack forgets the record of what key names with the next batch.
func (r *requestTemps) untrack(key string) {
	r.mu.Lock()
	id, ok := r.ids[key]
	delete(r.ids, key)
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

// withUploads returns ctx recording the S3 multipart uploads started under it in this request's
// records (s3.WithUploadRecorder).
func (r *requestTemps) withUploads(ctx context.Context) context.Context {
	return s3.WithUploadRecorder(ctx, r)
}

// Started implements s3.UploadRecorder: the record is committed before it returns, so before
// the upload's first part is sent.
func (r *requestTemps) Started(ctx context.Context, bucket, _, p, id string) error {
	rid := rand.Text()
	t := &store.TempFile{ID: rid, SystemOwner: r.owner, SystemID: r.system, Name: p, Bucket: bucket, UploadID: id,
		LeaseUntil: time.Now().Add(r.k.lease)}
	if err := r.k.s.deps.Store.RecordTemp(ctx, t); err != nil {
		return err
	}
	r.track("upload:"+id, rid)
	return nil
}

// Ended implements s3.UploadRecorder: the record is forgotten with the next batch.
func (r *requestTemps) Ended(id string) { r.untrack("upload:" + id) }

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
