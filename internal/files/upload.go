package files

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/pkg/sftp"
)

// DefaultFileMode is the mode of uploaded files when UploadOptions.Mode is 0.
const DefaultFileMode os.FileMode = 0o644

// nameMax is the longest file name (in bytes) common remote file systems accept.
const nameMax = 255

// tempMarker and tempSuffix frame the random part of temporary names:
// ".<name>.sshapi-<16 hex digits>.part".
const (
	tempMarker = ".sshapi-"
	tempSuffix = ".part"
)

// UploadOptions controls Upload.
type UploadOptions struct {
	// Overwrite replaces an existing file atomically; without it an existing destination is
	// refused with fs.ErrExist.
	Overwrite bool
	// Parents creates missing parent directories.
	Parents bool
	// Mode is the new file's permission bits; 0 means those of the file being overwritten, or
	// DefaultFileMode for a new file.
	Mode os.FileMode
	// SHA256 is the expected hex digest of the content; when set and different, the upload is
	// discarded with ErrChecksumMismatch.
	SHA256 string
	// NoDigest leaves the body unhashed: the result carries no SHA256, and SHA256 must be empty.
	// Hashing is a third of an upload's CPU on a loopback path (SHA-256 runs at about 1.7 GB/s
	// per core), work a caller that does not look at the digest should not make a shared
	// service do.
	NoDigest bool
	// Stripes delivers further SFTP channels to the same system as they open. With them and
	// Buffers the body is written in chunks over the FS's channel at once and over each of these
	// as it arrives (WriteAt ranges into the temporary file, opened write-only on each channel
	// once created), for long fat paths where one channel's window is the limit. Hashing,
	// verification and the rename are unchanged. The sender owns the channels.
	Stripes <-chan *sftp.Client
	// Buffers are the chunk buffers (all the same length) of a striped upload, or, without
	// Stripes, of one written in chunks over the FS's channel alone (the body read a chunk at a
	// time straight into them while the last chunk is written): they bound its memory. Without
	// them the body goes through pkg/sftp's own 32 KiB reads.
	Buffers [][]byte
	// Plan, if set, is called once, when the temporary file exists and is owner-only and
	// before any data is written; what it returns replaces Stripes and Buffers. The caller's
	// own preparation of them (a round-trip probe that decides whether to stripe, and the
	// stripe channels' opening) thus runs beside the upload's first requests instead of
	// before them.
	Plan func() (stripes <-chan *sftp.Client, bufs [][]byte)
	// Trace, if set, is told of each step of the upload as it ends, for timing it: "created"
	// (the temporary file exists, owner-only), "planned" (Plan returned), "joined" (a stripe
	// channel's handle started writing), "written" (the body is read and every write
	// acknowledged), "closed" (mode set, every handle written through closed) and "renamed".
	// It must not block.
	Trace func(step string)
}

// trace tells opts.Trace of step, if set.
func (o UploadOptions) trace(step string) {
	if o.Trace != nil {
		o.Trace(step)
	}
}

// UploadResult reports a completed upload.
type UploadResult struct {
	// Path is the absolute path written.
	Path string `json:"path"`
	// Size is the number of bytes written.
	Size int64 `json:"size"`
	// SHA256 is the hex digest of the bytes written, computed while streaming; empty (and left
	// out of the JSON) when the upload was asked for no digest (UploadOptions.NoDigest).
	SHA256 string `json:"sha256,omitempty"`
}

// Upload streams r into file p. Data goes to a temporary name in the same directory
// (".<name>.sshapi-<random>.part", see IsTempName) with pipelined concurrent writes and is hashed
// on the way; only when everything was written (and the digest matches opts.SHA256, if given)
// is the temporary file renamed into place, atomically replacing an existing file when
// opts.Overwrite is set. On any error, including ctx cancellation and a reader error, the
// temporary file is removed and an existing destination is left untouched. (If the connection
// itself drops, the temporary file cannot be removed now; with Options.Temps its record lets it
// be removed later.)
func (f *FS) Upload(ctx context.Context, p string, r io.Reader, opts UploadOptions) (*UploadResult, error) {
	const op = "upload"
	mode, err := fileMode(op, p, opts.Mode, 0)
	if err != nil {
		return nil, err
	}
	if err := f.ownerOnlyMode(op, p, mode); err != nil {
		return nil, err
	}
	want := strings.ToLower(opts.SHA256)
	if want != "" {
		if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
			return nil, newErr(op, p, ErrInvalid, fmt.Errorf("sha256 %q is not 64 hex digits", opts.SHA256))
		}
		if opts.NoDigest {
			return nil, newErr(op, p, ErrInvalid, errors.New("an expected sha256 needs the digest"))
		}
	}
	abs, err := f.resolve(ctx, op, p, false)
	if err != nil {
		return nil, err
	}
	if abs == "/" {
		return nil, newErr(op, abs, ErrIsDir, nil)
	}
	dir, name := path.Dir(abs), path.Base(abs)
	if opts.Parents {
		if err := f.mkdirAll(ctx, op, dir); err != nil {
			return nil, err
		}
	}
	// The destination's lstat and the temporary file's exclusive create (an open that asks for
	// the owner-only mode, then an fchmod not waited for: see createTempNoWait) go out
	// together: the lstat's answer is in by the time the temporary file's handle is, so it
	// costs no round trip of its own. A refusal it brings (a directory, an existing file
	// without Overwrite) removes the still empty temporary file.
	type lstat struct {
		fi  os.FileInfo
		ok  bool
		err error
	}
	dst := make(chan lstat, 1)
	go func() { // owned by Upload: it receives from dst before returning, on every path below
		fi, ok, err := f.exists(abs)
		dst <- lstat{fi, ok, err}
	}()
	tmp := path.Join(dir, tempName(name))
	gone, err := f.createTracked(ctx, op, abs, tmp)
	if err != nil {
		<-dst
		return nil, err
	}
	file, chmodded, err := f.createTempNoWait(op, abs, tmp)
	d := <-dst
	// The destination's verdict comes first, as when the lstat went before the create.
	refused := func() error {
		switch {
		case d.err != nil:
			return f.dirAwareErr(op, abs, d.err)
		case d.ok && d.fi.IsDir():
			return newErr(op, abs, ErrIsDir, nil)
		case d.ok && !opts.Overwrite:
			return newErr(op, abs, fs.ErrExist, nil)
		}
		return nil
	}
	if err != nil {
		f.createFailed(err, gone)
		if rerr := refused(); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	keep := false
	defer func() {
		_ = chmodded() // answered by now; waited for on every path, so its reply is consumed
		if !keep {
			_ = file.Close()
			f.removeTemp(tmp, gone) // best effort: the error being returned is the one that matters
		}
	}()
	if err := refused(); err != nil {
		return nil, err
	}
	if mode == 0 && d.ok && d.fi.Mode().IsRegular() {
		mode = d.fi.Mode().Perm() // an overwrite keeps the file's permissions unless told otherwise
	}
	if mode == 0 {
		mode = DefaultFileMode
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return nil, err
	}
	// A second handle to the temporary file, opened beside the data, only sets its final mode at
	// the end: that fsetstat and the close of the handle the data went through then go out
	// together (on one handle the close would wait for the fsetstat's reply), one round trip
	// before the rename instead of two.
	moder := f.openModeHandle(tmp)
	defer moder.close()
	opts.trace("created")
	if opts.Plan != nil {
		opts.Stripes, opts.Buffers = opts.Plan()
		opts.trace("planned")
	}
	var h hash.Hash
	var body io.Reader = ctxReader{ctx, r}
	if !opts.NoDigest {
		h = sha256.New()
		body = io.TeeReader(body, h)
	}
	var n int64
	stripesClosed := func() error { return nil }
	if len(opts.Buffers) > 0 {
		var closed func() error
		n, closed, err = f.writeStriped(ctx, file, tmp, r, h, opts) // hashes as it reads when h is set
		if closed != nil {
			// The stripe channels' handles close while the file below gets its mode and
			// closes; every close has reported before the rename, or before the temporary file
			// is removed on an error (deferred calls run last first).
			stripesClosed = closed
			defer closed()
		}
	} else {
		n, err = file.ReadFromWithConcurrency(body, 0)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, wrap(op, abs, ctx.Err())
		}
		return nil, f.writeErr(op, abs, err)
	}
	opts.trace("written")
	// The temporary file was owner-only before any data went in (long since answered).
	if err := chmodded(); err != nil {
		return nil, f.writeErr(op, abs, err)
	}
	// The data is complete: the file gets its final mode before it appears under its name, and
	// every handle written through has closed without an error (a late write error) before it
	// is renamed.
	if err := f.chmodClose(file, moder, mode); err != nil {
		return nil, f.writeErr(op, abs, err)
	}
	if err := stripesClosed(); err != nil {
		return nil, f.writeErr(op, abs, err) // a write the server failed late
	}
	opts.trace("closed")
	var sum string
	if h != nil {
		sum = hex.EncodeToString(h.Sum(nil))
	}
	if want != "" && want != sum {
		return nil, newErr(op, abs, ErrChecksumMismatch, fmt.Errorf("expected sha256 %s, got %s", want, sum))
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return nil, err
	}
	moder.closeAsync() // beside the rename: it wrote nothing, so its close reports nothing of use
	if err := f.rename(op, tmp, abs, opts.Overwrite); err != nil {
		return nil, err
	}
	keep = true
	gone()
	opts.trace("renamed")
	return &UploadResult{Path: abs, Size: n, SHA256: sum}, nil
}

// modeHandle is a read-only handle to an upload's temporary file used only to set its final mode
// (fsetstat, which never follows a symlink), opened in the background.
type modeHandle struct {
	done   chan struct{} // closed once the open has answered
	file   *sftp.File    // nil if the open failed
	closed chan struct{} // closed once file is closed (or there is nothing to close)
	once   sync.Once
}

// openModeHandle starts opening a second, read-only handle to tmp, which the caller has just
// created (O_EXCL) and made owner-only; by its name, as each stripe channel opens it (JoinOn).
// It reads and writes nothing.
func (f *FS) openModeHandle(tmp string) *modeHandle {
	m := &modeHandle{done: make(chan struct{}), closed: make(chan struct{})}
	go func() { // owned by m: close waits for it
		defer close(m.done)
		if h, err := f.c.OpenFile(tmp, os.O_RDONLY); err == nil {
			m.file = h
		}
	}()
	return m
}

// closeAsync starts closing the handle (once the open has answered), without waiting.
func (m *modeHandle) closeAsync() {
	m.once.Do(func() {
		go func() { // owned by m: close waits for it
			defer close(m.closed)
			<-m.done
			if m.file != nil {
				_ = m.file.Close()
			}
		}()
	})
}

// close closes the handle and waits for its open and its close to end.
func (m *modeHandle) close() {
	m.closeAsync()
	<-m.closed
}

// chmodClose sets file's final mode and closes it: through m's handle, the fsetstat and the
// close in flight together, or, where m's open failed, on file itself, one after the other. Both
// must succeed.
func (f *FS) chmodClose(file *sftp.File, m *modeHandle, mode os.FileMode) error {
	<-m.done // opened beside the data: long since answered
	if m.file == nil {
		if err := file.Chmod(mode); err != nil {
			_ = file.Close()
			return err
		}
		return file.Close()
	}
	chmodErr := make(chan error, 1)
	go func() { chmodErr <- m.file.Chmod(mode) }() // owned here: received below
	closeErr := file.Close()
	return errors.Join(<-chmodErr, closeErr)
}

// tempMode is the mode of a temporary file until it is complete: only its owner may open it.
const tempMode os.FileMode = 0o600

// createTemp creates the temporary file tmp for abs exclusively (O_EXCL: an existing name, a
// symlink included, is never opened or followed) and makes it owner-only before any data is
// written (see createTempNoWait), waiting for the fchmod's reply.
func (f *FS) createTemp(op, abs, tmp string) (*sftp.File, error) {
	file, chmodded, err := f.createTempNoWait(op, abs, tmp)
	if err != nil {
		return nil, err
	}
	if err := chmodded(); err != nil {
		_ = file.Close()
		_ = f.c.Remove(tmp)
		return nil, f.writeErr(op, abs, err)
	}
	return file, nil
}

// createTempNoWait is createTemp in one round trip: the exclusive create asks for the
// owner-only mode in its SSH_FXP_OPEN (OpenSSH's sftp-server creates the file with it, narrowed
// by its umask, so the file never exists with a wider mode), and the fchmod that makes it
// owner-only on a server that ignored that request is sent at once, ahead of every request the
// caller makes on the handle (OpenSSH's sftp-server handles them in order), without waiting for
// its reply. chmodded waits for that reply; the caller must call it, and must not let the file
// appear under its final name, or keep it, unless it returns nil.
func (f *FS) createTempNoWait(op, abs, tmp string) (file *sftp.File, chmodded func() error, err error) {
	file, err = f.c.OpenFilePerm(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, tempMode)
	if err != nil {
		if _, ok, _ := f.exists(tmp); ok && isFailure(err) {
			return nil, nil, newErr(op, tmp, fs.ErrExist, err)
		}
		return nil, nil, f.writeErr(op, abs, err)
	}
	return file, file.ChmodNoWait(tempMode), nil
}

// rename moves src to dst; with overwrite an existing dst is replaced atomically
// (posix-rename@openssh.com), without it an existing dst is refused with fs.ErrExist. Error
// paths name dst.
func (f *FS) rename(op, src, dst string, overwrite bool) error {
	var err error
	switch {
	case !overwrite:
		// OpenSSH's SSH_FXP_RENAME is link()+unlink() (or stat-then-rename): it never replaces.
		err = f.c.Rename(src, dst)
	case f.hasPosixRename():
		err = f.c.PosixRename(src, dst)
	default:
		if rerr := f.c.Remove(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return wrap(op, dst, rerr)
		}
		err = f.c.Rename(src, dst)
	}
	if err == nil {
		return nil
	}
	srcInfo, srcErr := f.c.Lstat(src)
	if errors.Is(srcErr, fs.ErrNotExist) {
		return newErr(op, src, fs.ErrNotExist, err)
	}
	// SSH_FX_FAILURE covers EEXIST, ENOTEMPTY and EISDIR; ENOTDIR arrives as NO_SUCH_FILE.
	if isFailure(err) || errors.Is(err, fs.ErrNotExist) {
		if dstInfo, ok, _ := f.exists(dst); ok {
			switch {
			case !overwrite:
				return newErr(op, dst, fs.ErrExist, err)
			case srcErr == nil && srcInfo.IsDir() && !dstInfo.IsDir():
				return newErr(op, dst, ErrNotDir, err)
			case srcErr == nil && !srcInfo.IsDir() && dstInfo.IsDir():
				return newErr(op, dst, ErrIsDir, err)
			case dstInfo.IsDir():
				return newErr(op, dst, ErrNotEmpty, err)
			}
		}
	}
	return f.dirAwareErr(op, dst, err)
}

// hasPosixRename reports whether the server offers posix-rename@openssh.com.
func (f *FS) hasPosixRename() bool {
	_, ok := f.c.HasExtension("posix-rename@openssh.com")
	return ok
}

// writeErr classifies a failure to create or write below path.Dir(abs): OpenSSH reports
// ENOSPC, EDQUOT and ENOTDIR as SSH_FX_FAILURE, so a statvfs and a stat tell them apart.
func (f *FS) writeErr(op, abs string, err error) error {
	if isFailure(err) {
		if vfs, verr := f.c.StatVFS(path.Dir(abs)); verr == nil && (vfs.Bavail == 0 || vfs.Favail == 0) {
			return newErr(op, abs, ErrNoSpace, err)
		}
	}
	return f.dirAwareErr(op, abs, err)
}

// dirAwareErr turns a failure on abs into ErrNotDir when an ancestor is not a directory.
func (f *FS) dirAwareErr(op, abs string, err error) error {
	if isFailure(err) || errors.Is(err, fs.ErrNotExist) {
		for d := path.Dir(abs); d != "/"; d = path.Dir(d) {
			fi, serr := f.c.Stat(d)
			if serr == nil {
				if !fi.IsDir() {
					return newErr(op, abs, ErrNotDir, fmt.Errorf("%s is not a directory", d))
				}
				break
			}
		}
	}
	return wrap(op, abs, err)
}

// mkdirAll creates dir and its missing parents.
func (f *FS) mkdirAll(ctx context.Context, op, dir string) error {
	if err := checkCtx(ctx, op, dir); err != nil {
		return err
	}
	if err := f.c.MkdirAll(dir); err != nil {
		return f.writeErr(op, dir, err)
	}
	return nil
}

// fileMode validates a requested mode (permission and setuid/setgid/sticky bits only) and
// applies the default for 0.
func fileMode(op, p string, m, def os.FileMode) (os.FileMode, error) {
	if m == 0 {
		return def, nil
	}
	if m&^(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
		return 0, newErr(op, p, ErrInvalid, fmt.Errorf("mode %v has bits other than permissions", m))
	}
	return m, nil
}

// tempName returns a fresh hidden temporary name for name, within nameMax bytes.
func tempName(name string) string {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails on supported platforms
	extra := 1 + len(tempMarker) + 2*len(rnd) + len(tempSuffix)
	if len(name)+extra > nameMax {
		name = truncateUTF8(name, nameMax-extra)
	}
	return "." + name + tempMarker + hex.EncodeToString(rnd[:]) + tempSuffix
}

// IsTempName reports whether a base name is one of the temporary names Upload and Compress
// write to before renaming into place; listings or cleanup jobs can use it to skip or reap them.
func IsTempName(name string) bool {
	i := strings.LastIndex(name, tempMarker)
	if !strings.HasPrefix(name, ".") || i < 1 || !strings.HasSuffix(name, tempSuffix) {
		return false
	}
	_, err := hex.DecodeString(name[i+len(tempMarker) : len(name)-len(tempSuffix)])
	return err == nil && len(name)-len(tempSuffix)-i-len(tempMarker) == 16
}

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ctxReader fails reads once ctx is done, so a cancelled request stops an upload between
// chunks.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

// Read implements io.Reader.
func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
