package files

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"strings"
	"syscall"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/storage"
)

// Sentinel errors returned (wrapped in *Error) by FS operations. The HTTP layer maps them to
// status codes; callers test them with errors.Is. Besides these, operations return errors
// wrapping fs.ErrNotExist (404), fs.ErrPermission (403) and fs.ErrExist (409).
var (
	// ErrNotEmpty reports a directory that still has entries (409). It is storage's, as are
	// ErrNotDir and ErrIsDir, so that errors of every storage backend match alike.
	ErrNotEmpty = storage.ErrNotEmpty
	// ErrNotDir reports a path component or target that is not a directory (409).
	ErrNotDir = storage.ErrNotDir
	// ErrIsDir reports a directory where a file was required (409).
	ErrIsDir = storage.ErrIsDir
	// ErrNoSpace reports a full file system or an exceeded quota (507).
	ErrNoSpace = errors.New("no space left on device or quota exceeded")
	// ErrOutsideRoot reports a path that leaves the configured RootDir (403).
	// It is confine.ErrOutside, so errors of transfers and of this package match alike.
	ErrOutsideRoot = confine.ErrOutside
	// ErrInvalid reports a bad argument: unknown algorithm or format, malformed mode, empty
	// path and the like (400).
	ErrInvalid = errors.New("invalid argument")
	// ErrChecksumMismatch reports uploaded data whose digest differs from the expected one (422).
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrConnection reports that the SSH connection or SFTP channel dropped (503); the
	// operation may be retried on a fresh connection.
	ErrConnection = errors.New("ssh connection lost")
)

// Error describes a failed operation on a remote path. Kind is one of the package's sentinels
// (or fs.ErrNotExist, fs.ErrPermission, fs.ErrExist) when the failure was classified, and Err
// is the underlying cause; errors.Is matches both.
type Error struct {
	// Op is the operation, e.g. "upload" or "stat".
	Op string
	// Path is the remote path the operation failed on, as resolved.
	Path string
	// Kind classifies the failure; nil when it could not be classified.
	Kind error
	// Err is the underlying error, if any beyond Kind.
	Err error
}

// Error formats "op path: kind: cause".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Path != "" {
		b.WriteString(" ")
		b.WriteString(e.Path)
	}
	if e.Kind != nil {
		b.WriteString(": ")
		b.WriteString(e.Kind.Error())
	}
	if e.Err != nil && e.Err != e.Kind {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap exposes both the classification and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	var out []error
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil && e.Err != e.Kind {
		out = append(out, e.Err)
	}
	return out
}

// newErr builds an *Error of a known kind with an optional cause.
func newErr(op, p string, kind, cause error) error {
	return &Error{Op: op, Path: p, Kind: kind, Err: cause}
}

// sftp status codes beyond protocol v3 that some servers (not OpenSSH's v3 sftp-server) send.
const (
	fxNoSpaceOnFilesystem = 14
	fxQuotaExceeded       = 15
	fxFileAlreadyExists   = 11
	fxDirNotEmpty         = 18
	fxNotADirectory       = 19
	fxFileIsADirectory    = 24
)

// classify returns the sentinel that best describes err, or nil when none applies. It does not
// disambiguate SSH_FX_FAILURE: callers that can do so with a stat do it themselves.
func classify(err error) error {
	for _, k := range []error{ErrNotEmpty, ErrNotDir, ErrIsDir, ErrNoSpace, ErrOutsideRoot,
		ErrInvalid, ErrChecksumMismatch, ErrConnection, fs.ErrNotExist, fs.ErrPermission, fs.ErrExist} {
		if errors.Is(err, k) {
			return k
		}
	}
	var se *sftp.StatusError
	if errors.As(err, &se) {
		switch se.Code {
		case fxNoSpaceOnFilesystem, fxQuotaExceeded:
			return ErrNoSpace
		case fxFileAlreadyExists:
			return fs.ErrExist
		case fxDirNotEmpty:
			return ErrNotEmpty
		case fxNotADirectory:
			return ErrNotDir
		case fxFileIsADirectory:
			return ErrIsDir
		case uint32(sftp.ErrSSHFxNoConnection), uint32(sftp.ErrSSHFxConnectionLost):
			return ErrConnection
		case uint32(sftp.ErrSSHFxBadMessage):
			return ErrInvalid
		}
		if k := classifyText(se.Error()); k != nil {
			return k
		}
		return nil
	}
	switch {
	case errors.Is(err, sftp.ErrSSHFxConnectionLost), errors.Is(err, sftp.ErrSSHFxNoConnection),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.ErrClosedPipe),
		errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ErrConnection
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ErrNoSpace
	case errors.Is(err, syscall.ENOTDIR):
		return ErrNotDir
	case errors.Is(err, syscall.EISDIR):
		return ErrIsDir
	case errors.Is(err, syscall.ENOTEMPTY):
		return ErrNotEmpty
	}
	return nil
}

// classifyText recognises errno messages (from a server's status text or a command's stderr).
func classifyText(s string) error {
	s = strings.ToLower(s)
	switch {
	case strings.Contains(s, "no space left"), strings.Contains(s, "quota exceeded"),
		strings.Contains(s, "disk quota"):
		return ErrNoSpace
	case strings.Contains(s, "permission denied"), strings.Contains(s, "operation not permitted"):
		return fs.ErrPermission
	case strings.Contains(s, "no such file or directory"):
		return fs.ErrNotExist
	case strings.Contains(s, "directory not empty"):
		return ErrNotEmpty
	case strings.Contains(s, "not a directory"):
		return ErrNotDir
	case strings.Contains(s, "is a directory"):
		return ErrIsDir
	case strings.Contains(s, "file exists"):
		return fs.ErrExist
	case strings.Contains(s, "does not look like a tar archive"), strings.Contains(s, "not in gzip format"):
		return ErrInvalid
	}
	return nil
}

// wrap turns a low-level error into an *Error for op on p, classifying it. Errors that already
// are *Error pass through unchanged so that they are wrapped only once.
func wrap(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is ours to report
	}
	return &Error{Op: op, Path: p, Kind: classify(err), Err: err}
}

// isFailure reports the generic SSH_FX_FAILURE that OpenSSH's protocol-v3 server sends for
// EEXIST, ENOTEMPTY, ENOSPC and most other errno values.
func isFailure(err error) bool {
	var se *sftp.StatusError
	return errors.As(err, &se) && se.Code == uint32(sftp.ErrSSHFxFailure)
}
