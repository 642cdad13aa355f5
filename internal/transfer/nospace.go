package transfer

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/pkg/sftp"
)

// A full destination. OpenSSH's sftp-server answers a write or a create that fails with ENOSPC
// (or EDQUOT) with the generic SSH_FX_FAILURE, so a transfer into a full file system used to
// retry showing "write: … SSH_FX_FAILURE". After such a failure the run asks the destination for
// its file system's free space (statvfs@openssh.com, as uploads do in package files) and, when
// it is nearly exhausted, says so: the error wraps ErrNoSpace and the transfer's error reads
// "no space left on the destination …". The failure stays retryable (space may be freed before
// the deadline), within the usual attempts per file.

// ErrNoSpace is wrapped by the error of a write, create or extraction on the destination that
// failed because its file system (or its inode table) is full.
var ErrNoSpace = errors.New("no space left on the destination")

// lowSpace is the free space under which an SSH_FX_FAILURE on a write is taken for a full file
// system: less than a few of the copy's blocks.
const lowSpace = 1 << 20

// isFxFailure reports whether err is SFTP's generic SSH_FX_FAILURE.
func isFxFailure(err error) bool {
	var se *sftp.StatusError
	return errors.As(err, &se) && se.FxCode() == sftp.ErrSSHFxFailure
}

// noSpace returns err wrapped with ErrNoSpace when it is an SSH_FX_FAILURE from writing p on
// the destination of stream s and the destination's file system holding p has (nearly) no free
// blocks or inodes left; otherwise err unchanged.
func (r *run) noSpace(ctx context.Context, s *stream, p string, err error) error {
	if err == nil || errors.Is(err, ErrNoSpace) || !isFxFailure(err) {
		return err
	}
	_, dc, cerr := s.clients(ctx)
	if cerr != nil {
		return err
	}
	return noSpaceOn(dc, path.Dir(p), err)
}

// noSpaceOn is noSpace with the destination's SFTP client and directory at hand.
func noSpaceOn(dc *sftp.Client, dir string, err error) error {
	if err == nil || errors.Is(err, ErrNoSpace) || !isFxFailure(err) {
		return err
	}
	vfs, verr := dc.StatVFS(dir)
	if verr != nil {
		return err
	}
	free := vfs.Bavail * vfs.Frsize
	if free >= lowSpace && vfs.Favail > 0 {
		return err
	}
	return fmt.Errorf("%w (%s: %d bytes and %d inodes free): %w", ErrNoSpace, dir, free, vfs.Favail, err)
}

// tarNoSpace reports whether tar's error output says the file system or the quota is full.
func tarNoSpace(stderr string) bool {
	return strings.Contains(stderr, "No space left on device") || strings.Contains(stderr, "Disk quota exceeded")
}
