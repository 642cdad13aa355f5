package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/pkg/sftp"
)

// Resumable uploads (tus): the data goes to a hidden part file next to the destination, named
// as Upload names its temporary files, over any number of requests, possibly on different
// connections and service instances. The caller keeps the committed offset (a write that fails
// part-way can leave the part file longer than what was committed) and gives the part file's
// name back on every call; every call resolves the destination again, confined like every
// other operation, so the part file is only ever looked for in the destination's directory.

// CreateResumable checks that an upload to p may start (a directory at p is ErrIsDir; without
// overwrite an existing file is fs.ErrExist), makes missing parents with parents, creates an
// empty owner-only part file and returns the destination's absolute path and the part file's
// base name.
func (f *FS) CreateResumable(ctx context.Context, p string, overwrite, parents bool) (abs, part string, err error) {
	const op = "upload"
	abs, err = f.resolve(ctx, op, p, false)
	if err != nil {
		return "", "", err
	}
	if abs == "/" {
		return "", "", newErr(op, abs, ErrIsDir, nil)
	}
	if parents {
		if err := f.mkdirAll(ctx, op, path.Dir(abs)); err != nil {
			return "", "", err
		}
	}
	if fi, ok, err := f.exists(abs); err != nil {
		return "", "", f.dirAwareErr(op, abs, err)
	} else if ok && fi.IsDir() {
		return "", "", newErr(op, abs, ErrIsDir, nil)
	} else if ok && !overwrite {
		return "", "", newErr(op, abs, fs.ErrExist, nil)
	}
	part = tempName(path.Base(abs))
	file, err := f.createTemp(op, abs, path.Join(path.Dir(abs), part))
	if err != nil {
		return "", "", err
	}
	if err := file.Close(); err != nil {
		_ = f.c.Remove(path.Join(path.Dir(abs), part))
		return "", "", f.writeErr(op, abs, err)
	}
	return abs, part, nil
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

// ResumableFile is an upload's part file opened for writing at offsets.
type ResumableFile struct {
	f    *FS
	abs  string
	tmp  string // the part file's absolute path
	file *sftp.File
}

// OpenResumable reopens the part file of an upload to p for writing. The part file must still
// be a regular file (never a symlink put in its place): else fs.ErrNotExist.
func (f *FS) OpenResumable(ctx context.Context, p, part string) (*ResumableFile, error) {
	const op = "upload"
	abs, tmp, err := f.partPath(ctx, op, p, part)
	if err != nil {
		return nil, err
	}
	fi, err := f.c.Lstat(tmp)
	if err != nil {
		return nil, wrap(op, abs, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, newErr(op, abs, fs.ErrNotExist, fmt.Errorf("part file %s is not a regular file", part))
	}
	file, err := f.c.OpenFile(tmp, os.O_WRONLY)
	if err != nil {
		return nil, f.writeErr(op, abs, err)
	}
	return &ResumableFile{f: f, abs: abs, tmp: tmp, file: file}, nil
}

// WriteAt writes b at off. On error some of b may have been written.
func (r *ResumableFile) WriteAt(b []byte, off int64) error {
	if _, err := r.file.WriteAt(b, off); err != nil {
		return r.f.writeErr("upload", r.abs, err)
	}
	return nil
}

// Close closes the part file.
func (r *ResumableFile) Close() error {
	if err := r.file.Close(); err != nil {
		return r.f.writeErr("upload", r.abs, err)
	}
	return nil
}

// FinishResumable cuts the part file of an upload to p at size (the committed length: a failed
// write may have left more), gives it its mode (an overwritten file's, else DefaultFileMode) and
// renames it into place, atomically replacing an existing file with overwrite (without it an
// existing file is fs.ErrExist). On failure the part file is removed, unless the connection
// failed (ErrConnection): then it stays for the caller to try again.
func (f *FS) FinishResumable(ctx context.Context, p, part string, size int64, overwrite bool) (*Entry, error) {
	const op = "upload"
	abs, tmp, err := f.partPath(ctx, op, p, part)
	if err != nil {
		return nil, err
	}
	mode := DefaultFileMode
	if fi, ok, err := f.exists(abs); err == nil && ok && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	}
	err = f.c.Truncate(tmp, size)
	if err == nil {
		err = f.c.Chmod(tmp, mode)
	}
	if err != nil {
		err = f.writeErr(op, abs, err)
	} else if err = checkCtx(ctx, op, abs); err == nil {
		err = f.rename(op, tmp, abs, overwrite)
	}
	if err != nil {
		if !errors.Is(err, ErrConnection) {
			_ = f.c.Remove(tmp)
		}
		return nil, err
	}
	return f.stat(ctx, op, abs, false)
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
