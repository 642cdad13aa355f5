package access

import (
	"context"
	"io"
	"time"

	"github.com/sshapi/sshapi/internal/storage"
)

// limited is a storage.Backend whose every request holds one of its owner's S3 slots while it
// runs (an Open until its reader is closed): the per-owner bound of S3Config.MaxRequestsPerOwner.
// A caller waits for a slot at most wait (then ErrBusy: 503, retry later), or until its context
// ends.
type limited struct {
	storage.Backend
	sem   chan struct{}
	wait  time.Duration // 0: as long as the context allows
	owner string
}

func (l *limited) acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if l.wait > 0 {
		t := time.NewTimer(l.wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return refuse(ErrBusy, "%s's S3 requests hold all %d of the owner's slots (s3.max_requests_per_owner); retry shortly", l.owner, cap(l.sem))
	}
}

func (l *limited) release() { <-l.sem }

// do runs fn in a slot.
func (l *limited) do(ctx context.Context, fn func() error) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
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
func (l *limited) Open(ctx context.Context, p string, off, n int64) (io.ReadCloser, error) {
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	rc, err := l.Backend.Open(ctx, p, off, n)
	if err != nil {
		l.release()
		return nil, err
	}
	return &slotReader{ReadCloser: rc, release: l.release}, nil
}

// Create implements storage.Backend.
func (l *limited) Create(ctx context.Context, p string, opts storage.UploadOptions) (u storage.Upload, err error) {
	err = l.do(ctx, func() error { u, err = l.Backend.Create(ctx, p, opts); return err })
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

// limitedUpload runs each part, commit and abort in a slot.
type limitedUpload struct {
	storage.Upload
	l *limited
}

// WritePart implements storage.Upload.
func (u *limitedUpload) WritePart(ctx context.Context, n int, off int64, r io.Reader, size int64, sum []byte) error {
	return u.l.do(ctx, func() error { return u.Upload.WritePart(ctx, n, off, r, size, sum) })
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

// slotReader releases its slot once, on Close.
type slotReader struct {
	io.ReadCloser
	release func()
	closed  bool
}

// Close implements io.Closer.
func (s *slotReader) Close() error {
	err := s.ReadCloser.Close()
	if !s.closed {
		s.closed = true
		s.release()
	}
	return err
}
