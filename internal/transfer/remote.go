package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/digest"
	"github.com/sshapi/sshapi/internal/shell"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// maxScript bounds a generated command line well below Linux's 128 KiB limit for one argument
// (the line reaches the server as `sh -c LINE`).
const maxScript = 64 << 10

// errPermanent marks failures that retrying cannot fix (missing source, permission denied,
// a directory where a file is expected).
var errPermanent = errors.New("permanent")

// errMismatch marks a verification failure; the file is copied again.
var errMismatch = errors.New("verification failed")

// permanent wraps err so that isPermanent reports true.
func permanent(err error) error { return fmt.Errorf("%w (%w)", err, errPermanent) }

// isPermanent reports whether err cannot be fixed by retrying.
func isPermanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errPermanent) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) ||
		sshpool.IsPermanentDialErr(err) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrSystem) {
		return true
	}
	var se *sftp.StatusError
	if errors.As(err, &se) {
		switch se.FxCode() {
		case sftp.ErrSSHFxNoSuchFile, sftp.ErrSSHFxPermissionDenied, sftp.ErrSSHFxOpUnsupported:
			return true
		}
	}
	return false
}

// isConnErr reports whether err means the SSH connection or channel (not the operation) failed.
func isConnErr(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.Is(err, sftp.ErrSSHFxConnectionLost) || errors.Is(err, sftp.ErrSSHFxNoConnection) ||
		errors.Is(err, sshpool.ErrConnLost) || errors.Is(err, sshpool.ErrUnavailable) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne) ||
		strings.Contains(err.Error(), "connection lost") || strings.Contains(err.Error(), "EOF")
}

// runner runs shell commands on one system.
type runner struct {
	pool command.Sessions
	t    sshpool.Target
	// maxOutput caps what is kept of a command's stdout and of its stderr (Config.HelperOutputBytes).
	maxOutput int64
}

// errHelperOutput is wrapped by the (permanent) error of a helper command whose output went
// beyond Config.HelperOutputBytes.
var errHelperOutput = errors.New("helper command output too large")

// run executes line and returns its stdout and stderr and exit status; a command that printed
// more than r.maxOutput on either is an error naming the limit, since its cut output cannot be
// trusted to list every result.
func (r runner) run(ctx context.Context, line string, timeout time.Duration) (string, string, int, error) {
	maxOut := r.maxOutput
	if maxOut <= 0 {
		maxOut = 1 << 20
	}
	res, err := command.Run(ctx, r.pool, r.t, command.Request{Command: line, Timeout: timeout, MaxOutput: maxOut}, nil)
	if err != nil {
		return "", "", -1, fmt.Errorf("run on %s: %w", r.t.Key, err)
	}
	if res.StdoutTruncated || res.StderrTruncated {
		return "", "", -1, permanent(fmt.Errorf("%w: a command on %s printed more than %d bytes (transfer.helper_output_bytes)",
			errHelperOutput, r.t.Key, maxOut))
	}
	if res.TimedOut {
		return res.Stdout, res.Stderr, -1, fmt.Errorf("command on %s timed out after %s", r.t.Key, timeout)
	}
	if res.ExitStatus == nil {
		return res.Stdout, res.Stderr, -1, fmt.Errorf("command on %s killed by signal %s", r.t.Key, res.Signal)
	}
	return res.Stdout, res.Stderr, *res.ExitStatus, nil
}

// classifyStderr turns a remote tool's error text into an error, permanent when it names a
// condition retrying cannot fix.
func classifyStderr(op, stderr string) error {
	msg := strings.TrimSpace(stderr)
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	err := fmt.Errorf("%s: %s", op, msg)
	for _, p := range []string{"No such file", "Permission denied", "Is a directory", "Not a directory", "Read-only file system"} {
		if strings.Contains(stderr, p) {
			return permanent(err)
		}
	}
	return err
}

// sha256Batch computes the sha256 of each file on the runner's system with digest's scripts
// (openssl when it works there, else sha256sum), as few as maxScript allows. Files that could not
// be read are missing from the map, by path, and their error is in errs.
func sha256Batch(ctx context.Context, r runner, files []digest.File, timeout time.Duration) (map[string]string, map[string]error, error) {
	sums := make(map[string]string, len(files))
	errs := map[string]error{}
	for len(files) > 0 {
		n, size := 0, 1024 // the script's header
		for _, f := range files {
			q := len(shell.Quote(f.Path)) + 16
			if n > 0 && size+q > maxScript {
				break
			}
			size += q
			n++
		}
		batch := files[:n]
		files = files[n:]
		stdout, stderr, _, err := r.run(ctx, digest.Script(digest.SHA256, batch), timeout)
		if err != nil {
			return nil, nil, err
		}
		for i, res := range digest.ParseOutput(digest.SHA256, batch, stdout, stderr) {
			if res.Sum != "" {
				sums[batch[i].Path] = res.Sum
			} else {
				errs[batch[i].Path] = classifyStderr("sha256 "+batch[i].Path, res.Err)
			}
		}
	}
	return sums, errs, nil
}

// copyPair is one server-side copy.
type copyPair struct{ src, dst string }

// cpBatch copies each pair on the server with `rm -f -- 'dst' && cp -p -- 'src' 'dst'`, as few commands as
// maxScript allows. It returns the error of each pair that failed.
func cpBatch(ctx context.Context, r runner, pairs []copyPair, timeout time.Duration) (map[int]error, error) {
	failed := map[int]error{}
	for base := 0; base < len(pairs); {
		var sb strings.Builder
		end := base
		for end < len(pairs) {
			p := pairs[end]
			// Each failure prints a marker with the pair's index and cp's message on stdout.
			// rm first: cp would write through a symlink already at the temporary name.
			line := fmt.Sprintf("{ rm -f -- %[2]s && cp -p -- %[1]s %[2]s; } 2>&1 | sed 's/^/%[3]d /' ; ", shell.Quote(p.src), shell.Quote(p.dst), end)
			if end > base && sb.Len()+len(line) > maxScript {
				break
			}
			sb.WriteString(line)
			end++
		}
		sb.WriteString("true")
		stdout, _, _, err := r.run(ctx, sb.String(), timeout)
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(stdout, "\n") {
			var idx int
			var rest string
			if n, _ := fmt.Sscanf(l, "%d", &idx); n != 1 || idx < base || idx >= end {
				continue
			}
			if sp := strings.IndexByte(l, ' '); sp >= 0 {
				rest = l[sp+1:]
			}
			if failed[idx] == nil {
				failed[idx] = classifyStderr("cp "+pairs[idx].src, rest)
			}
		}
		base = end
	}
	return failed, nil
}
