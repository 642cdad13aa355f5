// Package files implements every file operation sshapi offers on a remote system: listing,
// stat, streaming reads, verified atomic uploads, removal, moves, permissions, links, server-side
// copies, archives, checksums and disk usage.
//
// Plain operations go over one SFTP channel (github.com/pkg/sftp) and never start a process on
// the server. The few that no SFTP request can do (checksums, server-side copy, chown by name,
// tar, file type detection) run a command through a Runner, with every argument single-quoted
// and placed after "--" or in an option's value so that hostile names stay data.
//
// Failures are *Error values whose Kind is one of the package's sentinels (ErrNotEmpty,
// ErrOutsideRoot, ...) or fs.ErrNotExist, fs.ErrPermission, fs.ErrExist, so that a caller maps
// them to status codes with errors.Is.
//
// Listings of large directories can be kept between pages (Snapshots, ListOptions.Snapshots).
// A kept listing is served only after the caller has authorized and confined the page as any
// other, only to callers listing as the same system and credential, and only while the
// directory's mtime and size are those taken before it was listed, no write through the API on
// that system has completed since (Snapshots.Invalidate) and its TTL has not passed: entries
// created, removed or renamed show at the next page; an entry's own attributes changed outside
// the API show within the TTL. listsnap.go gives the reasoning.
//
// Through a share (Options.Within: a grant or a link) two things stay the owner's whatever the
// grantee does: setuid and setgid bits (Chmod, an upload's mode: a program the owner's account
// owns with one runs as the owner for whoever on the system executes it, including the
// grantee's own account there), and named pipes, which Extract never creates for anyone (an open
// of one blocks the channel's sftp-server, which serves the owner's other requests too).
package files

import (
	"context"
	"errors"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/digest"
)

// Runner runs a remote command. FS uses it only where no SFTP request can do the job
// (checksums, server-side copy, chown by name, tar, `file`). The command is a complete shell
// command line; Run returns the command's exit status when it ran to completion, and a non-nil
// error only when it could not be run or its outcome is unknown (e.g. the connection dropped).
type Runner interface {
	Run(ctx context.Context, command string, stdin io.Reader, stdout, stderr io.Writer) (exitStatus int, err error)
}

// Options configures an FS.
type Options struct {
	// Home is the remote user's home directory, the base of relative paths. When empty the
	// server is asked once (SFTP realpath of ".").
	Home string
	// RootDir confines every path to this directory tree, symlinks included. Empty means no
	// confinement.
	RootDir string
	// Within, if set, is a further root inside RootDir (a grant's or a link's path): every path
	// must stay below both.
	Within string
	// StreamDirBytes: a directory the server reports as larger than this (in bytes of
	// directory, not of content) is listed batch by batch over a channel of its own, when the
	// Runner implements Channels; a smaller one with one READDIR sequence on the shared
	// channel. 0 streams every directory.
	StreamDirBytes int64
	// ListCommand lists a directory that would be streamed (see StreamDirBytes) with one
	// `find -printf` run by the Runner instead of SFTP READDIRs, falling back to SFTP when find
	// cannot (no GNU find, no Runner).
	ListCommand bool
	// Tools, if set, is what checksums found out about this server's tools (whether its
	// openssl passed the self-test), shared by the FSes of the same server so the test runs
	// once rather than per checksum. Nil tests it in every checksum of a big file.
	Tools *digest.Tools
	// Temps, if set, is told of each temporary name a request-scoped operation creates (see
	// Temps). Nil records nothing: a name left behind by a lost connection stays.
	Temps Temps
}

// FS performs file operations on one remote system for one user. It is cheap to construct
// (no round trip until needed) and meant to be built per request around a pooled SFTP client;
// it is safe for concurrent use.
type FS struct {
	c    *sftp.Client
	run  Runner
	opts Options

	mu   sync.Mutex
	home string        // cleaned, absolute; "" until known
	root *confine.Root // nil until known
}

// New returns an FS that issues SFTP requests on c and runs commands with run. run may be nil;
// operations that need a command then fail with ErrInvalid.
func New(c *sftp.Client, run Runner, opts Options) *FS {
	f := &FS{c: c, run: run, opts: opts}
	if opts.Home != "" && strings.HasPrefix(opts.Home, "/") {
		f.home = path.Clean(opts.Home)
	}
	return f
}

// Home returns the remote home directory, asking the server once if Options.Home was empty.
func (f *FS) Home(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.home != "" {
		return f.home, nil
	}
	if err := ctx.Err(); err != nil {
		return "", wrap("getwd", "", err)
	}
	base := f.opts.Home // relative Home: resolve it on the server
	if base == "" {
		base = "."
	}
	h, err := f.c.RealPath(base)
	if err != nil {
		return "", wrap("getwd", base, err)
	}
	f.home = path.Clean(h)
	return f.home, nil
}

// KnownHome returns the home directory if this FS has already learned it (from Options.Home or
// from the server), without asking; callers cache it so the next FS needs no round trip.
func (f *FS) KnownHome() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.home, f.home != ""
}

// confinement returns the Root that judges this FS's paths (confining nothing without a
// RootDir), asking the server once for the home directory and the canonical root.
func (f *FS) confinement(ctx context.Context) (*confine.Root, error) {
	f.mu.Lock()
	rt := f.root
	f.mu.Unlock()
	if rt != nil {
		return rt, nil
	}
	h, err := f.Home(ctx)
	if err != nil {
		return nil, err
	}
	rt, err = confine.New(ctx, f.c, h, f.opts.RootDir)
	if err != nil {
		return nil, wrap("resolve root", f.opts.RootDir, err)
	}
	if f.opts.Within != "" {
		if rt, err = rt.Narrow(ctx, f.c, f.opts.Within); err != nil {
			return nil, wrap("resolve root", f.opts.Within, err)
		}
	}
	f.mu.Lock()
	f.root = rt
	f.mu.Unlock()
	return rt, nil
}

// Resolve turns a user-supplied path into a clean absolute remote path: relative paths are
// taken from the home directory, repeated slashes and "." and ".." are cleaned. With a RootDir
// the result, and the server's canonical form of it (following symlinks, for the existing part
// of the path), must stay inside RootDir, else the error wraps ErrOutsideRoot.
func (f *FS) Resolve(ctx context.Context, p string) (string, error) {
	return f.resolve(ctx, "resolve", p, true)
}

// resolve is Resolve for op. With followFinal false the final component is not dereferenced,
// for operations that act on a symlink itself (lstat, remove, rename, creating a new name).
func (f *FS) resolve(ctx context.Context, op, p string, followFinal bool) (string, error) {
	if p == "" {
		return "", newErr(op, p, ErrInvalid, errors.New("empty path"))
	}
	if strings.ContainsRune(p, 0) {
		return "", newErr(op, p, ErrInvalid, errors.New("path contains a NUL byte"))
	}
	if f.opts.RootDir == "" && f.opts.Within == "" && strings.HasPrefix(p, "/") {
		// Nothing confines, and an absolute path needs no home directory: no round trip (the
		// first request of a fresh connection, an upload's say, would otherwise ask for the home
		// directory first).
		return path.Clean(p), nil
	}
	rt, err := f.confinement(ctx)
	if err != nil {
		return "", err
	}
	abs, err := rt.Abs(p)
	if err != nil {
		return "", f.confineErr(op, p, err)
	}
	if err := rt.Check(ctx, f.c, abs, followFinal); err != nil {
		return "", f.confineErr(op, abs, err)
	}
	return abs, nil
}

// confineErr classifies an error of the confine package.
func (f *FS) confineErr(op, p string, err error) error {
	switch {
	case errors.Is(err, confine.ErrOutside):
		return newErr(op, p, ErrOutsideRoot, err)
	case errors.Is(err, confine.ErrInvalid):
		return newErr(op, p, ErrInvalid, err)
	}
	return wrap(op, p, err)
}

// checkCtx wraps ctx.Err() for op on p.
func checkCtx(ctx context.Context, op, p string) error {
	if err := ctx.Err(); err != nil {
		return wrap(op, p, err)
	}
	return nil
}
