package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/sshapi/sshapi/internal/confine"
)

// treeWorkers bounds the concurrent SFTP requests of a recursive remove or chmod within one
// directory.
const treeWorkers = 16

// Remove removes a file, symlink or empty directory; a non-empty directory needs recursive,
// else the error wraps ErrNotEmpty. Recursive removal walks the tree over SFTP (no `rm`
// process) without following symlinks. The root directory ("/" or RootDir) is never removed.
func (f *FS) Remove(ctx context.Context, p string, recursive bool) error {
	const op = "remove"
	abs, err := f.resolve(ctx, op, p, false)
	if err != nil {
		return err
	}
	if err := f.refuseRoot(ctx, op, abs); err != nil {
		return err
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return err
	}
	fi, err := f.c.Lstat(abs)
	if err != nil {
		return wrap(op, abs, err)
	}
	if !fi.IsDir() {
		return f.removeFile(op, abs)
	}
	if recursive {
		return f.removeTree(ctx, op, abs)
	}
	return f.rmdir(ctx, op, abs)
}

// refuseRoot fails for "/", for the RootDir itself and for the home directory: removing or
// renaming the home directory (DELETE ~?recursive=true) destroys everything the account owns and
// is never what an API caller means.
func (f *FS) refuseRoot(ctx context.Context, op, abs string) error {
	rt, err := f.confinement(ctx)
	if err != nil {
		return err
	}
	if abs == "/" || abs == rt.Dir() {
		return newErr(op, abs, ErrInvalid, errors.New("refusing to operate on the root directory"))
	}
	home, err := f.Home(ctx)
	if err != nil {
		return err
	}
	if abs == home {
		return newErr(op, abs, ErrInvalid, errors.New("refusing to remove or move the home directory"))
	}
	return nil
}

// removeFile removes a non-directory.
func (f *FS) removeFile(op, abs string) error {
	if err := f.c.Remove(abs); err != nil {
		return wrap(op, abs, err)
	}
	return nil
}

// rmdir removes an empty directory; OpenSSH reports ENOTEMPTY as SSH_FX_FAILURE, so a failure
// on a directory that still has entries becomes ErrNotEmpty.
func (f *FS) rmdir(ctx context.Context, op, abs string) error {
	err := f.c.RemoveDirectory(abs)
	if err == nil {
		return nil
	}
	if isFailure(err) {
		if infos, rerr := f.c.ReadDirContext(ctx, abs); rerr == nil && len(infos) > 0 {
			return newErr(op, abs, ErrNotEmpty, nil)
		}
	}
	return wrap(op, abs, err)
}

// removeTree removes dir and everything below it, depth first, removing the non-directories of
// each directory with up to treeWorkers requests in flight.
func (f *FS) removeTree(ctx context.Context, op, dir string) error {
	if err := checkCtx(ctx, op, dir); err != nil {
		return err
	}
	infos, err := f.c.ReadDirContext(ctx, dir)
	if err != nil {
		return wrap(op, dir, err)
	}
	var leaves []string
	for _, fi := range infos {
		p := path.Join(dir, fi.Name())
		if fi.IsDir() {
			if err := f.removeTree(ctx, op, p); err != nil {
				return err
			}
			continue
		}
		leaves = append(leaves, p)
	}
	if err := forEach(ctx, treeWorkers, leaves, func(p string) error { return f.removeFile(op, p) }); err != nil {
		return wrap(op, dir, err)
	}
	return f.rmdir(ctx, op, dir)
}

// Mkdir creates directory p; with parents, missing parents are created and an existing
// directory is not an error (like mkdir -p). An existing name fails with fs.ErrExist.
func (f *FS) Mkdir(ctx context.Context, p string, parents bool) error {
	const op = "mkdir"
	abs, err := f.resolve(ctx, op, p, false)
	if err != nil {
		return err
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return err
	}
	if parents {
		if fi, err := f.c.Stat(abs); err == nil && !fi.IsDir() {
			return newErr(op, abs, fs.ErrExist, errors.New("exists and is not a directory"))
		}
		return f.mkdirAll(ctx, op, abs)
	}
	return f.createErr(op, abs, f.c.Mkdir(abs))
}

// Move renames src to dst on the server. With overwrite an existing dst is replaced atomically
// (posix-rename@openssh.com; a directory only if empty); without it an existing dst fails with
// fs.ErrExist. Symlinks are moved themselves, not their targets.
func (f *FS) Move(ctx context.Context, src, dst string, overwrite bool) error {
	const op = "move"
	from, err := f.resolve(ctx, op, src, false)
	if err != nil {
		return err
	}
	to, err := f.resolve(ctx, op, dst, false)
	if err != nil {
		return err
	}
	for _, p := range []string{from, to} {
		if err := f.refuseRoot(ctx, op, p); err != nil {
			return err
		}
	}
	if err := checkCtx(ctx, op, from); err != nil {
		return err
	}
	return f.rename(op, from, to, overwrite)
}

// Chmod sets the permission bits (and setuid/setgid/sticky, see UnixMode) of p, following a
// symlink. With recursive, every file and directory below a directory p gets mode too; symlinks
// below p are skipped, as chmod -R does. Through a share only the owner's bits of
// ownerOnlyModeBits stay refused (see ownerOnlyMode).
func (f *FS) Chmod(ctx context.Context, p string, mode os.FileMode, recursive bool) error {
	const op = "chmod"
	if mode&^(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
		return newErr(op, p, ErrInvalid, fmt.Errorf("mode %v has bits other than permissions", mode))
	}
	if err := f.ownerOnlyMode(op, p, mode); err != nil {
		return err
	}
	abs, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return err
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return err
	}
	if recursive {
		fi, err := f.c.Stat(abs)
		if err != nil {
			return wrap(op, abs, err)
		}
		if fi.IsDir() {
			return f.chmodTree(ctx, op, abs, mode)
		}
	}
	return f.chmod(op, abs, mode)
}

// ownerOnlyModeBits are the mode bits only the owner may set: a file the owner's account owns
// with setuid (or setgid, its group) runs as the owner for whoever on the system executes it,
// so a grantee who could set them on a program it uploaded into the share could run anything
// as the owner from an account of its own on that system. The sticky bit gives no one more.
const ownerOnlyModeBits = os.ModeSetuid | os.ModeSetgid

// ownerOnlyMode refuses ownerOnlyModeBits in mode when this FS acts through a share (a grant or
// a link) with fs.ErrPermission.
func (f *FS) ownerOnlyMode(op, p string, mode os.FileMode) error {
	if f.opts.Within != "" && mode&ownerOnlyModeBits != 0 {
		return newErr(op, p, fs.ErrPermission, fmt.Errorf("mode %04o: setuid and setgid are set by the system's owner only", unixPerm(mode)))
	}
	return nil
}

// UnixMode is the os.FileMode of the POSIX mode bits m (as chmod(1) takes them in octal):
// permissions, and 04000, 02000 and 01000 as os.ModeSetuid, os.ModeSetgid and os.ModeSticky.
// Bits above 07777 are kept as they are, for the callers' own check to refuse.
func UnixMode(m uint32) os.FileMode {
	mode := os.FileMode(m &^ 0o7000)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// chmod sets mode on one path.
func (f *FS) chmod(op, abs string, mode os.FileMode) error {
	if err := f.c.Chmod(abs, mode); err != nil {
		return wrap(op, abs, err)
	}
	return nil
}

// chmodTree applies mode to dir and below. A mode that lets the owner list and enter the
// directory is applied before descending, any other after, so the walk can always read it.
func (f *FS) chmodTree(ctx context.Context, op, dir string, mode os.FileMode) error {
	if err := checkCtx(ctx, op, dir); err != nil {
		return err
	}
	first := mode&0o500 == 0o500
	if first {
		if err := f.chmod(op, dir, mode); err != nil {
			return err
		}
	}
	infos, err := f.c.ReadDirContext(ctx, dir)
	if err != nil {
		return wrap(op, dir, err)
	}
	var leaves []string
	for _, fi := range infos {
		p := path.Join(dir, fi.Name())
		switch {
		case fi.IsDir():
			if err := f.chmodTree(ctx, op, p, mode); err != nil {
				return err
			}
		case fi.Mode()&os.ModeSymlink == 0:
			leaves = append(leaves, p)
		}
	}
	if err := forEach(ctx, treeWorkers, leaves, func(p string) error { return f.chmod(op, p, mode) }); err != nil {
		return wrap(op, dir, err)
	}
	if !first {
		return f.chmod(op, dir, mode)
	}
	return nil
}

// Symlink creates link pointing to target. The target is stored as given (it may be relative
// to the link's directory and need not exist); with a RootDir it must point inside it, else
// ErrOutsideRoot. Through a grant or a link (Options.Within) the target must also point down
// (confine.DownwardLink), else fs.ErrPermission. An existing link name fails with fs.ErrExist.
func (f *FS) Symlink(ctx context.Context, target, link string) error {
	const op = "symlink"
	if target == "" || strings.ContainsRune(target, 0) {
		return newErr(op, link, ErrInvalid, errors.New("empty target or NUL byte in target"))
	}
	if f.opts.Within != "" {
		if err := confine.DownwardLink(target); err != nil {
			return newErr(op, link, fs.ErrPermission, err)
		}
	}
	abs, err := f.resolve(ctx, op, link, false)
	if err != nil {
		return err
	}
	rt, err := f.confinement(ctx)
	if err != nil {
		return err
	}
	if rt.Confined() {
		t := target
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(abs), t)
		}
		if _, err := f.resolve(ctx, op, t, true); err != nil {
			return err
		}
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return err
	}
	return f.createErr(op, abs, f.c.Symlink(target, abs))
}

// createErr classifies the failure of creating abs (mkdir, symlink): OpenSSH's generic failure
// is fs.ErrExist when the name is taken, else a write error; other statuses are mapped with the
// parent directory in mind.
func (f *FS) createErr(op, abs string, err error) error {
	if err == nil {
		return nil
	}
	if isFailure(err) {
		if _, ok, _ := f.exists(abs); ok {
			return newErr(op, abs, fs.ErrExist, err)
		}
		return f.writeErr(op, abs, err)
	}
	return f.dirAwareErr(op, abs, err)
}

// DiskUsage reports the capacity of the file system holding a path.
type DiskUsage struct {
	// Path is the absolute path asked about.
	Path string `json:"path"`
	// TotalBytes is the file system's size.
	TotalBytes uint64 `json:"total_bytes"`
	// FreeBytes is the free space, including blocks reserved for root.
	FreeBytes uint64 `json:"free_bytes"`
	// AvailableBytes is the space available to the remote user.
	AvailableBytes uint64 `json:"available_bytes"`
	// TotalInodes, FreeInodes and AvailableInodes count file slots likewise.
	TotalInodes     uint64 `json:"total_inodes"`
	FreeInodes      uint64 `json:"free_inodes"`
	AvailableInodes uint64 `json:"available_inodes"`
	// BlockSize is the fundamental block size.
	BlockSize uint64 `json:"block_size"`
}

// DiskUsage reports the capacity of the file system holding p (statvfs@openssh.com).
func (f *FS) DiskUsage(ctx context.Context, p string) (*DiskUsage, error) {
	const op = "df"
	abs, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return nil, err
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return nil, err
	}
	v, err := f.c.StatVFS(abs)
	if err != nil {
		return nil, wrap(op, abs, err)
	}
	return &DiskUsage{
		Path:            abs,
		TotalBytes:      v.Blocks * v.Frsize,
		FreeBytes:       v.Bfree * v.Frsize,
		AvailableBytes:  v.Bavail * v.Frsize,
		TotalInodes:     v.Files,
		FreeInodes:      v.Ffree,
		AvailableInodes: v.Favail,
		BlockSize:       v.Frsize,
	}, nil
}
