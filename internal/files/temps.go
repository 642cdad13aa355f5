package files

import (
	"context"
	"errors"
	"io/fs"
	"path"
)

// Temps keeps a record of the temporary names that an operation bounded by one request creates:
// an upload's part file, an archive being built, an extraction directory. Such a name is
// removed by the operation itself when it fails, but not when its process is killed or its SSH
// connection is lost; the record lets whoever keeps it remove the name later (RemoveTemp).
//
// Creating is called before the name exists and its error stops the operation, so no name
// exists without its record. Gone is called once the name no longer exists (renamed into place
// or removed); a name the operation could not remove is simply never reported gone. Resumable
// uploads and transfer parts outlive their request and keep records of their own; a resumable
// upload's part file is recorded here only until its own record holds it (CreateResumable).
type Temps interface {
	// Creating records the temporary name in directory dir (both absolute and clean).
	Creating(ctx context.Context, dir, name string) error
	// Gone reports that the name recorded by Creating no longer exists.
	Gone(dir, name string)
}

// createTracked records tmp with f.opts.Temps (if any) before anything exists under it. It
// returns the function to call once tmp is gone.
func (f *FS) createTracked(ctx context.Context, op, abs, tmp string) (gone func(), err error) {
	if f.opts.Temps == nil {
		return func() {}, nil
	}
	dir, name := path.Split(tmp)
	dir = path.Clean(dir)
	if err := f.opts.Temps.Creating(ctx, dir, name); err != nil {
		return nil, wrap(op, abs, err)
	}
	return func() { f.opts.Temps.Gone(dir, name) }, nil
}

// removeTemp removes the temporary file tmp and reports it gone when it is (removed now, or
// not there). The error of the removal is not returned: the caller's error is the one that
// matters, and a name that stays is removed later through its record.
func (f *FS) removeTemp(tmp string, gone func()) {
	if err := f.c.Remove(tmp); err == nil || errors.Is(err, fs.ErrNotExist) {
		gone()
	}
}

// createFailed settles the record of a temporary name whose exclusive create failed with err:
// a name that already existed is not ours (the record goes, the name stays); after any other
// failure the name may exist (a reply lost with the connection), so the record stays.
func (f *FS) createFailed(err error, gone func()) {
	if errors.Is(err, fs.ErrExist) {
		gone()
	}
}

// RemoveTemp removes the temporary name name left in directory dir by an operation that could
// not remove it: a file, or (an extraction's) directory tree, not followed if it is a link. The
// name must be a temporary name (IsTempName) and dir must be within the FS's root; a name
// already gone is no error.
func (f *FS) RemoveTemp(ctx context.Context, dir, name string) error {
	const op = "remove temporary"
	if name != path.Base(name) || !IsTempName(name) {
		return newErr(op, path.Join(dir, name), ErrInvalid, errors.New("not a temporary name"))
	}
	absDir, err := f.resolve(ctx, op, dir, true)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	p := path.Join(absDir, name)
	fi, err := f.c.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return wrap(op, p, err)
	}
	if fi.IsDir() {
		return f.removeTree(ctx, op, p)
	}
	if err := f.c.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap(op, p, err)
	}
	return nil
}
