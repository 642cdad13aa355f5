package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/pkg/sftp"
)

// Resumable uploads (tus): the data goes to a hidden part file next to the destination, named
// as Upload names its temporary files, over any number of requests, possibly on different
// connections and service instances. The caller keeps the committed offset (a write that fails
// part-way can leave the part file longer than what was committed) and gives the part file's
// name back on every call; every call resolves the destination again, confined like every
// other operation, so the part file is only ever looked for in the destination's directory.
//
// Between two calls nothing is held: a principal with write access to the directory (a write
// grantee) may rename anything onto the part file's name, an owner's link leading out of the
// grant included. So no call acts on the part file by name before it has found a regular file
// there: OpenResumable and FinishResumable lstat it beside their open and refuse anything else,
// and the by-name requests that follow (cut, mode, rename) run under the same guard hold as
// that check, during which no grantee can restructure the directory (package guard).

// CreateResumable checks that an upload to p may start (a directory at p is ErrIsDir; without
// overwrite an existing file is fs.ErrExist), makes missing parents with parents, creates an
// empty owner-only part file and returns the destination's absolute path and the part file's
// base name. The part file's name is recorded with the FS's Temps before it exists, like any
// request's temporary name; the caller calls recorded once the upload's own record holds the
// name (or the name is gone), so a process killed in between leaves a name the sweep of
// temporary names removes, not an orphan no record names.
func (f *FS) CreateResumable(ctx context.Context, p string, overwrite, parents bool) (abs, part string, recorded func(), err error) {
	const op = "upload"
	abs, err = f.resolve(ctx, op, p, false)
	if err != nil {
		return "", "", nil, err
	}
	if abs == "/" {
		return "", "", nil, newErr(op, abs, ErrIsDir, nil)
	}
	if parents {
		if err := f.mkdirAll(ctx, op, path.Dir(abs)); err != nil {
			return "", "", nil, err
		}
	}
	if fi, ok, err := f.exists(abs); err != nil {
		return "", "", nil, f.dirAwareErr(op, abs, err)
	} else if ok && fi.IsDir() {
		return "", "", nil, newErr(op, abs, ErrIsDir, nil)
	} else if ok && !overwrite {
		return "", "", nil, newErr(op, abs, fs.ErrExist, nil)
	}
	part = tempName(path.Base(abs))
	tmp := path.Join(path.Dir(abs), part)
	gone, err := f.createTracked(ctx, op, abs, tmp)
	if err != nil {
		return "", "", nil, err
	}
	file, err := f.createTemp(op, abs, tmp)
	if err != nil {
		f.createFailed(err, gone)
		return "", "", nil, err
	}
	if err := file.Close(); err != nil {
		f.removeTemp(tmp, gone)
		return "", "", nil, f.writeErr(op, abs, err)
	}
	return abs, part, gone, nil
}

// partPath resolves p and returns the destination and its part file's path; part must be a
// name CreateResumable gave.
func (f *FS) partPath(ctx context.Context, op, p, part string) (abs, tmp string, err error) {
	if !IsTempName(part) || strings.ContainsRune(part, '/') {
		return "", "", newErr(op, p, ErrInvalid, fmt.Errorf("%q is not a part file name", part))
	}
	abs, err = f.resolve(ctx, op, p, false)
	if err != nil {
		return "", "", err
	}
	if abs == "/" {
		return "", "", newErr(op, abs, ErrIsDir, nil)
	}
	return abs, path.Join(path.Dir(abs), part), nil
}

// ResumableFile is an upload's part file opened for writing at offsets: on the FS's channel
// and, after a striped Append, on the stripe channels too (Close or Finish closes them all).
type ResumableFile struct {
	f    *FS
	abs  string
	tmp  string // the part file's absolute path
	file *sftp.File

	mu    sync.Mutex
	stops []func() []*sftp.File // Append's joining of stripe channels: each returns its handles

	mode chan os.FileMode // the destination's mode for Finish; nil unless opened for it
}

// OpenResumable reopens the part file of an upload to p for writing. The part file must still
// be a regular file (never a symlink put in its place): else fs.ErrNotExist. Its lstat and its
// open go out together, one round trip; a handle opened where the lstat finds no regular file
// is closed without a byte written through it.
func (f *FS) OpenResumable(ctx context.Context, p, part string) (*ResumableFile, error) {
	return f.openResumable(ctx, p, part, false)
}

// OpenResumableToFinish is OpenResumable for the request that will write an upload's last
// bytes: the destination's mode, which Finish gives the part file, is looked up beside the
// open rather than after the data.
func (f *FS) OpenResumableToFinish(ctx context.Context, p, part string) (*ResumableFile, error) {
	return f.openResumable(ctx, p, part, true)
}

func (f *FS) openResumable(ctx context.Context, p, part string, finish bool) (*ResumableFile, error) {
	const op = "upload"
	abs, tmp, err := f.partPath(ctx, op, p, part)
	if err != nil {
		return nil, err
	}
	rf := &ResumableFile{f: f, abs: abs, tmp: tmp}
	if finish {
		rf.mode = make(chan os.FileMode, 1)
		go func() { // owned by rf: Finish receives from rf.mode; the send never blocks
			rf.mode <- f.destMode(abs)
		}()
	}
	type opened struct {
		file *sftp.File
		err  error
	}
	oc := make(chan opened, 1)
	go func() { // owned here: received below on every path
		file, err := f.c.OpenFile(tmp, os.O_WRONLY)
		oc <- opened{file, err}
	}()
	fi, lerr := f.c.Lstat(tmp)
	o := <-oc
	switch {
	case lerr != nil:
		err = wrap(op, abs, lerr)
	case !fi.Mode().IsRegular():
		err = newErr(op, abs, fs.ErrNotExist, fmt.Errorf("part file %s is not a regular file", part))
	case o.err != nil:
		err = f.writeErr(op, abs, o.err)
	}
	if err != nil {
		if o.file != nil {
			_ = o.file.Close()
		}
		rf.waitMode()
		return nil, err
	}
	rf.file = o.file
	return rf, nil
}

// destMode is the mode an upload's file gets: the permissions of the regular file it
// overwrites, else DefaultFileMode.
func (f *FS) destMode(abs string) os.FileMode {
	if fi, ok, err := f.exists(abs); err == nil && ok && fi.Mode().IsRegular() {
		return fi.Mode().Perm()
	}
	return DefaultFileMode
}

// waitMode waits for the destination's mode lookup, if one runs, and returns its answer.
func (r *ResumableFile) waitMode() os.FileMode {
	if r.mode == nil {
		return DefaultFileMode
	}
	m := <-r.mode
	r.mode <- m // for a later call
	return m
}

// WriteAt writes b at off. On error some of b may have been written.
func (r *ResumableFile) WriteAt(b []byte, off int64) error {
	r.mu.Lock()
	file := r.file
	r.mu.Unlock()
	if file == nil {
		return newErr("upload", r.abs, fs.ErrClosed, nil)
	}
	if _, err := file.WriteAt(b, off); err != nil {
		return r.f.writeErr("upload", r.abs, err)
	}
	return nil
}

// Close closes the part file, on every channel it is open on, all at once. Closing it again,
// or after Finish, does nothing.
func (r *ResumableFile) Close() error {
	r.waitMode()
	if err := r.closeAll(); err != nil {
		return r.f.writeErr("upload", r.abs, err)
	}
	return nil
}

// closeAll closes every handle not yet closed, all at once, and joins their errors (a close
// reports a write the server failed late).
func (r *ResumableFile) closeAll() error {
	r.mu.Lock()
	stops, file := r.stops, r.file
	r.file, r.stops = nil, nil
	r.mu.Unlock()
	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	closeAsync := func(h *sftp.File) {
		wg.Go(func() {
			if err := h.Close(); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	if file != nil {
		closeAsync(file) // at once: the stripe channels' opens under way are waited for below
	}
	for _, stop := range stops {
		for _, h := range stop() {
			closeAsync(h)
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Finish completes the upload whose last byte was written through r: it closes every handle
// and, in the same round trip, cuts the part file at size (the committed length: a failed write
// may have left more) and gives it its mode (an overwritten file's, else DefaultFileMode; see
// OpenResumableToFinish); once all of that succeeded it renames the part file into place,
// atomically replacing an existing file with overwrite (without it an existing file is
// fs.ErrExist). On failure the part file is removed, unless it may still be finished (PartKept:
// the connection failed, or ctx ended before the rename): then it stays for the caller to try
// again.
func (r *ResumableFile) Finish(ctx context.Context, size int64, overwrite bool) error {
	const op = "upload"
	mode := r.waitMode()
	var truncErr, chmodErr error
	var wg sync.WaitGroup
	wg.Go(func() { truncErr = r.f.c.Truncate(r.tmp, size) })
	wg.Go(func() { chmodErr = r.f.c.Chmod(r.tmp, mode) })
	closeErr := r.closeAll()
	wg.Wait()
	var err error
	if err = errors.Join(truncErr, chmodErr, closeErr); err != nil {
		err = r.f.writeErr(op, r.abs, err)
	} else if err = checkCtx(ctx, op, r.abs); err == nil {
		err = r.f.rename(op, r.tmp, r.abs, overwrite)
	}
	if err != nil && !PartKept(err) {
		_ = r.f.c.Remove(r.tmp)
	}
	return err
}

// PartKept reports whether a resumable upload's finish that failed with err left its part file
// in place for another try: the connection failed (ErrConnection), or the caller's context
// ended before the rename (a client gone after its last byte; a request that lost the upload
// to another). Any other failure removed it.
func PartKept(err error) bool {
	return errors.Is(err, ErrConnection) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// FinishResumable cuts the part file of an upload to p at size (the committed length: a failed
// write may have left more), gives it its mode (an overwritten file's, else DefaultFileMode) and
// renames it into place, atomically replacing an existing file with overwrite (without it an
// existing file is fs.ErrExist). It is the finish of an upload whose last byte went in an
// earlier request (an empty upload whose first finish lost its connection), so the part file is
// opened as OpenResumable opens it first: whatever was put at its name meanwhile (a link to a
// file outside the grant, renamed there by a write grantee) is refused with fs.ErrNotExist
// before anything is cut or changed by name, and the cut, the mode and the rename that follow go
// out under the caller's guard like every finish's (ResumableFile.Finish). On failure the part
// file is removed, unless it may still be finished (PartKept): then it stays for the caller to
// try again.
func (f *FS) FinishResumable(ctx context.Context, p, part string, size int64, overwrite bool) (*Entry, error) {
	const op = "upload"
	rf, err := f.openResumable(ctx, p, part, true)
	if err != nil {
		return nil, err
	}
	if err := rf.Finish(ctx, size, overwrite); err != nil {
		return nil, err
	}
	return f.stat(ctx, op, rf.abs, false)
}

// RemoveResumable removes the part file of an upload to p; one already gone is no error.
func (f *FS) RemoveResumable(ctx context.Context, p, part string) error {
	const op = "upload"
	abs, tmp, err := f.partPath(ctx, op, p, part)
	if err != nil {
		return err
	}
	if err := f.c.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap(op, abs, err)
	}
	return nil
}
