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
package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/pkg/sftp"
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
	// StreamDirBytes: a directory the server reports as larger than this (in bytes of
	// directory, not of content) is listed batch by batch over a channel of its own, when the
	// Runner implements Channels; a smaller one with one READDIR sequence on the shared
	// channel. 0 streams every directory.
	StreamDirBytes int64
}

// FS performs file operations on one remote system for one user. It is cheap to construct
// (no round trip until needed) and meant to be built per request around a pooled SFTP client;
// it is safe for concurrent use.
type FS struct {
	c    *sftp.Client
	run  Runner
	opts Options

	mu   sync.Mutex
	home string // cleaned, absolute; "" until known
	root string // canonical RootDir on the server; "" until known or when unconfined
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

// rootDir returns RootDir made absolute and clean (lex) and its canonical form on the server
// (canon), asking the server once; both are "" when unconfined.
func (f *FS) rootDir(ctx context.Context) (lex, canon string, err error) {
	if f.opts.RootDir == "" {
		return "", "", nil
	}
	lex = f.opts.RootDir
	if !strings.HasPrefix(lex, "/") {
		h, err := f.Home(ctx)
		if err != nil {
			return "", "", err
		}
		lex = path.Join(h, lex)
	}
	lex = path.Clean(lex)
	f.mu.Lock()
	canon = f.root
	f.mu.Unlock()
	if canon != "" {
		return lex, canon, nil
	}
	if err := ctx.Err(); err != nil {
		return "", "", wrap("resolve root", lex, err)
	}
	c, err := f.c.RealPath(lex)
	if err != nil {
		return "", "", wrap("resolve root", lex, err)
	}
	canon = path.Clean(c)
	f.mu.Lock()
	f.root = canon
	f.mu.Unlock()
	return lex, canon, nil
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
	abs, err := f.lexical(ctx, op, p)
	if err != nil {
		return "", err
	}
	lexRoot, root, err := f.rootDir(ctx)
	if err != nil || root == "" {
		return abs, err
	}
	if !within(lexRoot, abs) {
		return "", newErr(op, abs, ErrOutsideRoot, nil)
	}
	// The root itself may be given through a symlink: it is always taken as its target.
	canon, err := f.canonical(ctx, op, abs, followFinal || abs == lexRoot)
	if err != nil {
		return "", err
	}
	if !within(root, canon) {
		return "", newErr(op, abs, ErrOutsideRoot, fmt.Errorf("resolves to %s", canon))
	}
	return abs, nil
}

// lexical makes p absolute and clean without asking the server (except for the home
// directory once).
func (f *FS) lexical(ctx context.Context, op, p string) (string, error) {
	if p == "" {
		return "", newErr(op, p, ErrInvalid, errors.New("empty path"))
	}
	if strings.ContainsRune(p, 0) {
		return "", newErr(op, p, ErrInvalid, errors.New("path contains a NUL byte"))
	}
	if strings.HasPrefix(p, "/") {
		return path.Clean(p), nil
	}
	h, err := f.Home(ctx)
	if err != nil {
		return "", err
	}
	return path.Join(h, p), nil
}

// canonical asks the server for the real location of abs. A missing tail is appended to the
// canonical form of its nearest existing ancestor, so that new names created below a symlinked
// directory are caught too.
func (f *FS) canonical(ctx context.Context, op, abs string, followFinal bool) (string, error) {
	if !followFinal && abs != "/" {
		dir, err := f.canonical(ctx, op, path.Dir(abs), true)
		if err != nil {
			return "", err
		}
		return path.Join(dir, path.Base(abs)), nil
	}
	if err := ctx.Err(); err != nil {
		return "", wrap(op, abs, err)
	}
	canon, err := f.c.RealPath(abs)
	if err == nil {
		return path.Clean(canon), nil
	}
	if !errors.Is(err, fs.ErrNotExist) || abs == "/" {
		return "", wrap(op, abs, err)
	}
	dir, err := f.canonical(ctx, op, path.Dir(abs), true)
	if err != nil {
		return "", err
	}
	return path.Join(dir, path.Base(abs)), nil
}

// within reports whether p is root or below it; both are clean absolute paths.
func within(root, p string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// checkCtx wraps ctx.Err() for op on p.
func checkCtx(ctx context.Context, op, p string) error {
	if err := ctx.Err(); err != nil {
		return wrap(op, p, err)
	}
	return nil
}
