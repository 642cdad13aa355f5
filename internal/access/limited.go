package access

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sshapi/sshapi/internal/slot"
	"github.com/sshapi/sshapi/internal/storage"
)

// limited is a storage.Backend whose every request holds one of its owner's S3 slots while it
// runs (an Open until its reader is closed; every method that makes requests is wrapped here,
// and an Upload it returns, made by Create or Resume, is wrapped likewise): the per-owner bound of S3Config.MaxRequestsPerOwner
// within the server's S3Config.MaxRequests. A caller waits for a slot at most wait (then
// ErrBusy: 503, retry later), or until its context ends. The slots are a slot.Pool: an owner's
// share exists while one of its requests holds or waits for a slot and is dropped after, so
// the owners who ever used S3 leave nothing behind, and a share is never made twice for one
// owner while anyone holds or waits for the first.
type limited struct {
	storage.Backend
	slots *slot.Pool
	wait  time.Duration // 0: as long as the context allows
	owner string
}

func (l *limited) acquire(ctx context.Context) (*slot.Lease, error) {
	if lease, err := l.slots.TryAcquire(l.owner, 1); err == nil {
		return lease, nil
	}
	wait := ctx
	if l.wait > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, l.wait)
		defer cancel()
	}
	lease, err := l.slots.Acquire(wait, l.owner, 1)
	switch {
	case err == nil:
		return lease, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, slot.ErrFull):
		return nil, refuse(ErrBusy, "S3 requests hold all %d of the server's slots (s3.max_requests); retry shortly", l.slots.Capacity())
	default:
		return nil, refuse(ErrBusy, "%s's S3 requests hold all %d of the owner's slots (s3.max_requests_per_owner); retry shortly", l.owner, l.slots.Share())
	}
}

// do runs fn in a slot.
func (l *limited) do(ctx context.Context, fn func() error) error {
	lease, err := l.acquire(ctx)
	if err != nil {
		return err
	}
	defer lease.Release()
	return fn()
}

// Stat implements storage.Backend.
func (l *limited) Stat(ctx context.Context, p string) (e *storage.Entry, err error) {
	err = l.do(ctx, func() error { e, err = l.Backend.Stat(ctx, p); return err })
	return e, err
}

// List implements storage.Backend.
func (l *limited) List(ctx context.Context, dir, cursor string, limit int) (pg *storage.Page, err error) {
	err = l.do(ctx, func() error { pg, err = l.Backend.List(ctx, dir, cursor, limit); return err })
	return pg, err
}

// Open implements storage.Backend; the slot is held until the reader is closed.
func (l *limited) Open(ctx context.Context, p string, off, n int64, etag string) (io.ReadCloser, error) {
	lease, err := l.acquire(ctx)
	if err != nil {
		return nil, err
	}
	rc, err := l.Backend.Open(ctx, p, off, n, etag)
	if err != nil {
		lease.Release()
		return nil, err
	}
	return &slotReader{ReadCloser: rc, lease: lease}, nil
}

// Create implements storage.Backend.
func (l *limited) Create(ctx context.Context, p string, opts storage.UploadOptions) (u storage.Upload, err error) {
	err = l.do(ctx, func() error { u, err = l.Backend.Create(ctx, p, opts); return err })
	if err != nil {
		return nil, err
	}
	return &limitedUpload{Upload: u, l: l}, nil
}

// Resume implements storage.Backend: the listing of the upload's parts runs in a slot, and so
// does every request of the upload it returns.
func (l *limited) Resume(ctx context.Context, p, id string, known []storage.Part, opts storage.UploadOptions) (u storage.Upload, err error) {
	err = l.do(ctx, func() error { u, err = l.Backend.Resume(ctx, p, id, known, opts); return err })
	if err != nil {
		return nil, err
	}
	return &limitedUpload{Upload: u, l: l}, nil
}

// Remove implements storage.Backend.
func (l *limited) Remove(ctx context.Context, p string, recursive bool) error {
	return l.do(ctx, func() error { return l.Backend.Remove(ctx, p, recursive) })
}

// Mkdir implements storage.Backend.
func (l *limited) Mkdir(ctx context.Context, p string, parents bool) error {
	return l.do(ctx, func() error { return l.Backend.Mkdir(ctx, p, parents) })
}

// Rename implements storage.Backend.
func (l *limited) Rename(ctx context.Context, from, to string, overwrite bool) error {
	return l.do(ctx, func() error { return l.Backend.Rename(ctx, from, to, overwrite) })
}

// Copy implements storage.Backend.
func (l *limited) Copy(ctx context.Context, from, to string, overwrite bool) error {
	return l.do(ctx, func() error { return l.Backend.Copy(ctx, from, to, overwrite) })
}

// CanCopyFrom implements storage.CrossCopier: the wrapped backend decides, asked about src's own
// backend (an owner's limited backend is unwrapped), so a transfer between two buckets of one
// server reached with one credential is copied on the server through the API too.
func (l *limited) CanCopyFrom(src storage.Backend) bool {
	cc, ok := l.Backend.(storage.CrossCopier)
	return ok && cc.CanCopyFrom(unlimited(src))
}

// CopyFrom implements storage.CrossCopier. The copy holds one slot of this backend's owner (the
// destination's, whose credential makes its requests) until it ends; the source's owner holds
// none, so a copy between two backends of one owner never waits for a second slot of its own.
// Its requests are bounded all the same: a copy makes at most one at a time.
func (l *limited) CopyFrom(ctx context.Context, src storage.Backend, from, to, etag string) (e *storage.Entry, ok bool, err error) {
	cc, isCopier := l.Backend.(storage.CrossCopier)
	if !isCopier || !cc.CanCopyFrom(unlimited(src)) {
		return nil, false, nil
	}
	err = l.do(ctx, func() error { e, ok, err = cc.CopyFrom(ctx, unlimited(src), from, to, etag); return err })
	return e, ok, err
}

// unlimited is b without the per-owner wrapper.
func unlimited(b storage.Backend) storage.Backend {
	if l, ok := b.(*limited); ok {
		return l.Backend
	}
	return b
}

var _ storage.CrossCopier = (*limited)(nil)

// limitedUpload runs each request of an upload in a slot: ID (which may start the multipart
// upload and send a part held back), each part, the commit and the abort.
type limitedUpload struct {
	storage.Upload
	l *limited
}

// WritePart implements storage.Upload.
func (u *limitedUpload) WritePart(ctx context.Context, n int, off int64, r io.Reader, size int64, sum []byte) error {
	return u.l.do(ctx, func() error { return u.Upload.WritePart(ctx, n, off, r, size, sum) })
}

// ID implements storage.Upload.
func (u *limitedUpload) ID(ctx context.Context) (id string, err error) {
	err = u.l.do(ctx, func() error { id, err = u.Upload.ID(ctx); return err })
	return id, err
}

// Commit implements storage.Upload.
func (u *limitedUpload) Commit(ctx context.Context) (e *storage.Entry, err error) {
	err = u.l.do(ctx, func() error { e, err = u.Upload.Commit(ctx); return err })
	return e, err
}

// Abort implements storage.Upload. It waits for a slot even if ctx is canceled meanwhile no
// longer than ctx allows; callers abort with a context of their own.
func (u *limitedUpload) Abort(ctx context.Context) error {
	return u.l.do(ctx, func() error { return u.Upload.Abort(ctx) })
}

// slotReader releases its slot on Close (a second Close releases nothing more).
type slotReader struct {
	io.ReadCloser
	lease *slot.Lease
}

// Close implements io.Closer.
func (s *slotReader) Close() error {
	err := s.ReadCloser.Close()
	s.lease.Release()
	return err
}
