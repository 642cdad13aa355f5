package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/pkg/sftp"
)

// ErrPartDigest reports a part whose bytes do not match the digest it came with.
var ErrPartDigest = errors.New("part does not match its sha256")

// PartUpload is a file written in numbered parts at their offsets into a temporary file in the
// destination's directory (as Upload names it), and renamed into place by Commit: until then
// nothing is at the destination, and Abort (or a failed Commit) removes the temporary file. It is
// the storage.Upload of the SFTP backend. Parts may be written concurrently and again.
type PartUpload struct {
	f         *FS
	abs, tmp  string
	file      *sftp.File
	mode      fs.FileMode
	overwrite bool

	mu    sync.Mutex
	parts map[int][2]int64 // part number → offset, size
	done  bool
}

// CreateParts starts a PartUpload to file p, making missing parent directories with parents.
// Without overwrite an existing file is refused (fs.ErrExist) now and at Commit; a directory at
// p is ErrIsDir.
func (f *FS) CreateParts(ctx context.Context, p string, overwrite, parents bool) (*PartUpload, error) {
	const op = "upload"
	abs, err := f.resolve(ctx, op, p, false)
	if err != nil {
		return nil, err
	}
	if abs == "/" {
		return nil, newErr(op, abs, ErrIsDir, nil)
	}
	if parents {
		if err := f.mkdirAll(ctx, op, path.Dir(abs)); err != nil {
			return nil, err
		}
	}
	mode := DefaultFileMode
	if fi, ok, err := f.exists(abs); err != nil {
		return nil, f.dirAwareErr(op, abs, err)
	} else if ok && fi.IsDir() {
		return nil, newErr(op, abs, ErrIsDir, nil)
	} else if ok && !overwrite {
		return nil, newErr(op, abs, fs.ErrExist, nil)
	} else if ok && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	}
	tmp := path.Join(path.Dir(abs), tempName(path.Base(abs)))
	file, err := f.createTemp(op, abs, tmp)
	if err != nil {
		return nil, err
	}
	return &PartUpload{f: f, abs: abs, tmp: tmp, file: file, mode: mode, overwrite: overwrite, parts: map[int][2]int64{}}, nil
}

// ResumeParts reopens the temporary file tmpName (a PartUpload's TempName) of an upload to file
// p, for an upload that outlived its process. The file must still be there, a regular file
// under a temporary name in p's directory; it is opened without O_CREATE, never followed if it
// became a link (Lstat first). It returns the upload, with no parts known (Adopt declares the
// parts the caller confirmed), and the temporary file's size.
func (f *FS) ResumeParts(ctx context.Context, p, tmpName string, overwrite bool) (*PartUpload, int64, error) {
	const op = "upload"
	abs, err := f.resolve(ctx, op, p, false)
	if err != nil {
		return nil, 0, err
	}
	if abs == "/" || !IsTempName(tmpName) || strings.ContainsRune(tmpName, '/') {
		return nil, 0, newErr(op, abs, fs.ErrNotExist, fmt.Errorf("no upload %q", tmpName))
	}
	tmp := path.Join(path.Dir(abs), tmpName)
	fi, err := f.c.Lstat(tmp)
	if err != nil {
		return nil, 0, f.dirAwareErr(op, tmp, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, newErr(op, tmp, fs.ErrNotExist, errors.New("the temporary file is not a regular file"))
	}
	mode := DefaultFileMode
	if dfi, ok, err := f.exists(abs); err != nil {
		return nil, 0, f.dirAwareErr(op, abs, err)
	} else if ok && dfi.IsDir() {
		return nil, 0, newErr(op, abs, ErrIsDir, nil)
	} else if ok && !overwrite {
		return nil, 0, newErr(op, abs, fs.ErrExist, nil)
	} else if ok && dfi.Mode().IsRegular() {
		mode = dfi.Mode().Perm()
	}
	file, err := f.c.OpenFile(tmp, os.O_WRONLY)
	if err != nil {
		return nil, 0, f.writeErr(op, abs, err)
	}
	return &PartUpload{f: f, abs: abs, tmp: tmp, file: file, mode: mode, overwrite: overwrite, parts: map[int][2]int64{}}, fi.Size(), nil
}

// TempName is the base name of the temporary file, which ResumeParts takes to reopen it.
func (u *PartUpload) TempName() string { return path.Base(u.tmp) }

// Adopt declares part n (size bytes at off) as written, for a resumed upload whose caller
// confirmed it.
func (u *PartUpload) Adopt(n int, off, size int64) {
	u.mu.Lock()
	u.parts[n] = [2]int64{off, size}
	u.mu.Unlock()
}

// Path is the destination's absolute path.
func (u *PartUpload) Path() string { return u.abs }

// WritePart writes part n (size bytes of r) at offset off. The part is read whole first (memory:
// its size), checked against sum when given, and written with pipelined requests.
func (u *PartUpload) WritePart(ctx context.Context, n int, off int64, r io.Reader, size int64, sum []byte) error {
	const op = "upload"
	if n < 1 || off < 0 || size < 0 {
		return newErr(op, u.abs, ErrInvalid, fmt.Errorf("part %d at %d of %d bytes", n, off, size))
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(ctxReader{ctx, r}, buf); err != nil {
		return wrap(op, u.abs, fmt.Errorf("part %d: %w", n, err))
	}
	if sum != nil {
		if got := sha256.Sum256(buf); !bytes.Equal(got[:], sum) {
			return newErr(op, u.abs, ErrPartDigest, fmt.Errorf("part %d", n))
		}
	}
	u.mu.Lock()
	done := u.done
	u.mu.Unlock()
	if done {
		return newErr(op, u.abs, ErrInvalid, errors.New("upload already committed or aborted"))
	}
	if size > 0 {
		if _, err := u.file.WriteAt(buf, off); err != nil {
			return u.f.writeErr(op, u.abs, err)
		}
	}
	u.mu.Lock()
	u.parts[n] = [2]int64{off, size}
	u.mu.Unlock()
	return nil
}

// Commit checks that parts 1..N were written without gap or overlap, cuts the file at their
// end, gives it its mode and renames it into place.
func (u *PartUpload) Commit(ctx context.Context) (*Entry, error) {
	const op = "upload"
	u.mu.Lock()
	if u.done {
		u.mu.Unlock()
		return nil, newErr(op, u.abs, ErrInvalid, errors.New("upload already committed or aborted"))
	}
	var end int64
	for i := 1; i <= len(u.parts); i++ {
		p, ok := u.parts[i]
		if !ok || p[0] != end {
			u.mu.Unlock()
			_ = u.Abort(context.WithoutCancel(ctx))
			return nil, newErr(op, u.abs, ErrInvalid, fmt.Errorf("part %d missing or not where part %d ends", i, i-1))
		}
		end += p[1]
	}
	u.done = true
	u.mu.Unlock()
	err := u.file.Truncate(end) // a part written longer before being written again
	if err == nil {
		err = u.file.Chmod(u.mode)
	}
	if cerr := u.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		err = u.f.writeErr(op, u.abs, err)
	} else if err = checkCtx(ctx, op, u.abs); err == nil {
		err = u.f.rename(op, u.tmp, u.abs, u.overwrite) // classified already
	}
	if err != nil {
		_ = u.f.c.Remove(u.tmp)
		return nil, err
	}
	return u.f.stat(ctx, op, u.abs, false)
}

// Abort removes the temporary file.
func (u *PartUpload) Abort(context.Context) error {
	u.mu.Lock()
	u.done = true
	u.mu.Unlock()
	_ = u.file.Close()
	if err := u.f.c.Remove(u.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap("upload", u.abs, err)
	}
	return nil
}
