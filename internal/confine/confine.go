// Package confine keeps remote paths inside a system's root directory (root_dir). It is the one
// implementation of that rule: file operations, transfers (every item, both ends) and archive
// extraction all ask a Root.
//
// A path is judged twice: as written (made absolute against the home directory and cleaned, it
// must lie below the root as configured) and as the server sees it (every symlink along the way
// followed, it must lie below the root's canonical form). The second judgement asks the server:
// SFTP realpath for the part that exists, and, where realpath fails because something does not
// exist, lstat and readlink of that component, so that a dangling symlink (the next file created
// through it would land wherever it points) is followed too. A name that does not exist yet is
// judged by its parent directory. A symlink about to be made (a transfer recreating one) is
// judged by where its target will lead, resolved like a dangling one (CheckLink), never by
// cleaning the target lexically.
//
// The check and the operation that follows it are separate SFTP requests, and SFTP v3 has no way
// to bind them (no openat, no O_NOFOLLOW per component, no inode in the attributes): whoever can
// change the tree between them can lead the operation elsewhere. A Root alone stops what an API
// caller can do with paths; it does not stop a principal who restructures the tree at the same
// time. Principals acting through grants and links can do that through the API, so their
// operations are ordered by package guard (restructuring ones run alone), and a caller that
// releases the guard between two uses of a Root calls Forget when it holds it again. The owner,
// and anyone with a shell on the system, are not ordered.
//
// The guard orders operations; it cannot order time. A share's own path (Narrow: a grant's or a
// link's) is the one path a Root follows with no bound but root_dir, and it is looked up anew
// by every request, long after whoever acts through an enclosing share may have renamed or
// copied entries at it or above it (an owner's link out of both shares included). So Narrow
// refuses a share's path that passes through a symlink below its base (the root directory or
// the home directory, which no share can restructure): a share always names the directory or
// file at its path as written, and nothing put there can lead it elsewhere.
package confine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
)

// ErrOutside reports a path that leaves the root directory.
var ErrOutside = errors.New("path is outside the allowed root directory")

// ErrInvalid reports a path that cannot name a file: empty or containing a NUL byte.
var ErrInvalid = errors.New("invalid path")

// maxLinks bounds the symlinks followed by hand (dangling ones) while resolving one path, like
// the kernel's ELOOP limit.
const maxLinks = 40

// maxCachedDirs bounds the directories a Root remembers; the memory is forgotten when full.
const maxCachedDirs = 4096

// Client is the part of an SFTP client (*sftp.Client) a Root needs.
type Client interface {
	RealPath(p string) (string, error)
	Lstat(p string) (os.FileInfo, error)
	ReadLink(p string) (string, error)
}

// Root confines paths to one directory tree on one system. The zero value is not usable; build
// one with New. A Root holds no connection: every check is given the client to ask, so that one
// Root serves a transfer whose connections come and go (all to the same system). It remembers
// the canonical form of the directories it resolved, so a Root lives as long as one request or
// one transfer run, not longer. It is safe for concurrent use.
type Root struct {
	home  string // absolute, clean
	lex   string // the root as configured, absolute and clean; "" when unconfined
	canon string // the server's canonical form of lex

	mu   sync.Mutex
	dirs map[string]string // canonical forms of directories already resolved
}

// New returns the Root for rootDir on the system c talks to. home is the remote user's home
// directory (absolute), the base of relative paths and of a relative rootDir. An empty rootDir
// confines nothing: Resolve then only makes paths absolute and clean. The server is asked once
// for the canonical root.
func New(ctx context.Context, c Client, home, rootDir string) (*Root, error) {
	if !strings.HasPrefix(home, "/") {
		return nil, fmt.Errorf("home directory %q is not absolute", home)
	}
	r := &Root{home: path.Clean(home), dirs: map[string]string{}}
	if rootDir == "" {
		return r, nil
	}
	r.lex = r.join(rootDir)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	canon, err := c.RealPath(r.lex)
	if err != nil {
		return nil, fmt.Errorf("resolve root directory %s: %w", r.lex, err)
	}
	r.canon = path.Clean(canon)
	return r, nil
}

// Dir returns the root directory as configured (absolute, clean), or "" when unconfined.
func (r *Root) Dir() string { return r.lex }

// Confined reports whether the Root confines anything.
func (r *Root) Confined() bool { return r.lex != "" }

// join makes p absolute against home and clean.
func (r *Root) join(p string) string {
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	return path.Join(r.home, p)
}

// Abs makes p absolute (relative paths start at home) and clean without asking the server, and
// checks it lies below the root as configured. It refuses an empty path and a NUL byte with
// ErrInvalid.
func (r *Root) Abs(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path: %w", ErrInvalid)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path contains a NUL byte: %w", ErrInvalid)
	}
	abs := r.join(p)
	if r.lex != "" && !Within(r.lex, abs) {
		return "", fmt.Errorf("%s: %w", abs, ErrOutside)
	}
	return abs, nil
}

// Resolve is Abs followed by Check: the returned path is absolute, clean and confined.
func (r *Root) Resolve(ctx context.Context, c Client, p string, followFinal bool) (string, error) {
	abs, err := r.Abs(p)
	if err != nil {
		return "", err
	}
	return abs, r.Check(ctx, c, abs, followFinal)
}

// Check verifies that the absolute clean path abs stays below the root once the server resolves
// it. With followFinal false the last component is not dereferenced: that suits operations on a
// name itself (lstat, remove, rename onto it, creating it). The root itself is always taken as
// its target.
func (r *Root) Check(ctx context.Context, c Client, abs string, followFinal bool) error {
	if r.lex == "" {
		return nil
	}
	if !Within(r.lex, abs) {
		return fmt.Errorf("%s: %w", abs, ErrOutside)
	}
	hops := 0
	canon, err := r.canonical(ctx, c, abs, followFinal || abs == r.lex, &hops)
	if err != nil {
		return err
	}
	if !Within(r.canon, canon) {
		return fmt.Errorf("%s resolves to %s: %w", abs, canon, ErrOutside)
	}
	return nil
}

// canonical returns the server's view of abs with every symlink followed (the last one only
// with followFinal); names that do not exist are appended to their nearest existing ancestor's
// canonical form.
func (r *Root) canonical(ctx context.Context, c Client, abs string, followFinal bool, hops *int) (string, error) {
	if abs == "/" {
		return "/", nil
	}
	if !followFinal {
		dir, err := r.canonDir(ctx, c, path.Dir(abs), hops)
		if err != nil {
			return "", err
		}
		return path.Join(dir, path.Base(abs)), nil
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if dir, ok := r.cachedDir(path.Dir(abs)); ok {
		// The parent is known: one lstat tells whether the name adds a symlink.
		fi, err := c.Lstat(abs)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return path.Join(dir, path.Base(abs)), nil
		case err != nil:
			return "", fmt.Errorf("lstat %s: %w", abs, err)
		case fi.Mode()&fs.ModeSymlink == 0:
			return path.Join(dir, path.Base(abs)), nil
		}
	}
	real, err := c.RealPath(abs)
	if err == nil {
		return path.Clean(real), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("resolve %s: %w", abs, err)
	}
	// Something along abs is missing: abs itself, an ancestor, or what a symlink points to.
	fi, lerr := c.Lstat(abs)
	switch {
	case lerr == nil && fi.Mode()&fs.ModeSymlink != 0:
		return r.follow(ctx, c, abs, hops)
	case lerr != nil && !errors.Is(lerr, fs.ErrNotExist):
		return "", fmt.Errorf("lstat %s: %w", abs, lerr)
	}
	dir, err := r.canonDir(ctx, c, path.Dir(abs), hops)
	if err != nil {
		return "", err
	}
	return path.Join(dir, path.Base(abs)), nil
}

// canonDir is canonical for a parent directory, remembered for the Root's lifetime: the items of
// a transfer or an archive share few directories.
func (r *Root) canonDir(ctx context.Context, c Client, dir string, hops *int) (string, error) {
	if v, ok := r.cachedDir(dir); ok {
		return v, nil
	}
	v, err := r.canonical(ctx, c, dir, true, hops)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	if len(r.dirs) >= maxCachedDirs {
		clear(r.dirs)
	}
	r.dirs[dir] = v
	r.mu.Unlock()
	return v, nil
}

// Forget drops the directories the Root remembers. A caller whose paths others may restructure
// between its uses (a transfer through a grant, between two holds of the owner's guard) calls it
// when it holds again, so nothing judged before is trusted after.
func (r *Root) Forget() {
	r.mu.Lock()
	clear(r.dirs)
	r.mu.Unlock()
}

// cachedDir returns the remembered canonical form of dir.
func (r *Root) cachedDir(dir string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.dirs[dir]
	return v, ok
}

// follow resolves the dangling symlink at abs one component of its target at a time, since a
// ".." after a symlink in the target is not the lexical parent.
func (r *Root) follow(ctx context.Context, c Client, abs string, hops *int) (string, error) {
	if *hops++; *hops > maxLinks {
		return "", fmt.Errorf("resolve %s: too many levels of symbolic links: %w", abs, ErrInvalid)
	}
	target, err := c.ReadLink(abs)
	if err != nil {
		return "", fmt.Errorf("readlink %s: %w", abs, err)
	}
	cur := "/"
	if !strings.HasPrefix(target, "/") {
		if cur, err = r.canonDir(ctx, c, path.Dir(abs), hops); err != nil {
			return "", err
		}
	}
	for _, comp := range strings.Split(target, "/") {
		switch comp {
		case "", ".":
		case "..":
			cur = path.Dir(cur) // cur is canonical: its lexical parent is its real parent
		default:
			if cur, err = r.canonical(ctx, c, path.Join(cur, comp), true, hops); err != nil {
				return "", err
			}
		}
	}
	return cur, nil
}

// ErrDotDotAfterName reports a symlink target with a ".." component after a name (as in
// "a/../b"; leading ones, as in "../../b", are fine). It wraps ErrOutside.
var ErrDotDotAfterName = fmt.Errorf("a symlink's target may climb (\"..\") only before its first name: %w", ErrOutside)

// CheckLink verifies that a symbolic link to be made at at (absolute and clean, judged itself
// by Check without following it) pointing to target would lead below the root, as the server
// resolves a link: a relative target from the canonical form of the link's directory, each
// component in turn, symlinks followed (like a dangling link in Check). An absolute target must
// also lie below the root as written.
//
// A ".." after a name is refused (ErrDotDotAfterName), not judged: "a/../b" leads to b's
// sibling of wherever a leads, and what a is when the link is followed — a directory, a
// symlink to the root itself, or a name that does not exist yet — is not fixed by the check.
// The link's own directory is (the link lives in it), so leading ".." are climbed from its
// canonical form, and what follows them descends through names that are judged as any path
// is. Lexical cleaning of the whole target would get this wrong: "up/../x" with up a symlink
// to the root itself leaves the root, though "root/x" is inside.
func (r *Root) CheckLink(ctx context.Context, c Client, at, target string) error {
	if r.lex == "" {
		return nil
	}
	if target == "" || strings.ContainsRune(target, 0) {
		return fmt.Errorf("symlink target %q: %w", target, ErrInvalid)
	}
	var climb int
	var names []string
	for _, comp := range strings.Split(target, "/") {
		switch {
		case comp == "" || comp == ".":
		case comp != "..":
			names = append(names, comp)
		case len(names) > 0:
			return fmt.Errorf("symlink %s -> %s: %w", at, target, ErrDotDotAfterName)
		default:
			climb++
		}
	}
	hops := 0
	start := "/"
	if !strings.HasPrefix(target, "/") {
		var err error
		if start, err = r.canonDir(ctx, c, path.Dir(at), &hops); err != nil {
			return err
		}
	}
	for range climb {
		start = path.Dir(start) // start is canonical: its lexical parent is its real parent
	}
	dest := path.Join(start, strings.Join(names, "/"))
	if strings.HasPrefix(target, "/") && !Within(r.lex, dest) {
		return fmt.Errorf("symlink %s -> %s: %w", at, target, ErrOutside)
	}
	canon, err := r.canonical(ctx, c, dest, true, &hops)
	if err != nil {
		return err
	}
	if !Within(r.canon, canon) {
		return fmt.Errorf("symlink %s -> %s resolves to %s: %w", at, target, canon, ErrOutside)
	}
	return nil
}

// ErrClimbingLink reports a symlink target that may not be created through a grant or a link:
// absolute, empty, or with a ".." component.
var ErrClimbingLink = errors.New("a symlink created through a grant or a link must point down: relative, without \"..\"")

// DownwardLink checks a symlink target for creation by someone acting through a grant or a link:
// relative and without "..", so that it resolves below its own directory wherever the link is
// later moved inside the grant. A target like "../x" resolves inside when created in share/d
// and outside once the link is moved to share/; such links are refused, not judged where they
// stand.
func DownwardLink(target string) error {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
		return fmt.Errorf("target %q: %w", target, ErrClimbingLink)
	}
	for _, c := range strings.Split(target, "/") {
		if c == ".." {
			return fmt.Errorf("target %q: %w", target, ErrClimbingLink)
		}
	}
	return nil
}

// Within reports whether p is dir or below it; both are clean absolute paths.
func Within(dir, p string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// ErrLinkedRoot reports a grant's or link's path that passes through a symbolic link below the
// home directory or the root directory (see Narrow). It wraps ErrOutside.
var ErrLinkedRoot = fmt.Errorf("a shared path is followed through no symbolic link below the home or root directory: %w", ErrOutside)

// Narrow returns a Root for dir, a further root inside r (a grant's or a link's path): dir must
// lie below r as written and as the server resolves it, so a path inside the returned Root is
// inside r too. dir need not exist yet (a link to a file to be uploaded).
//
// dir must also resolve to itself below its base, the deepest of the root directory, the home
// directory and "/" that holds it as written: no component of dir below the base (dir itself
// included) may be a symlink, else the error wraps ErrLinkedRoot. A path inside the returned
// Root is judged against it, symlinks followed; dir itself is the one path that is followed
// without a bound other than r, so what it resolves to must not be up to anyone but the owner.
// It would be: a share's path usually lies inside another share (a read grant or a link on
// share/pub, a write grant on share/), and whoever acts through the outer one may rename or
// copy entries at share/pub or above it (an owner's symlink leading out of both included:
// moves and copies relocate links as they are), between two requests, with no guard held and
// no check of its own to fail. Refusing a symlink there makes it a matter of the tree as
// written: an entry renamed into place at share/pub is then a real directory or file, and
// what lies below it is judged against share/pub as anything is. The base cannot be
// restructured through a share: the root directory holds every share's path and a share's
// own root is never removed or renamed (nor is the home directory), so symlinks at the base or
// above it are the system's or the owner's, and are followed. An owner who means to share
// what a link points to shares the path it resolves to, which the error names.
func (r *Root) Narrow(ctx context.Context, c Client, dir string) (*Root, error) {
	abs, err := r.Abs(dir)
	if err != nil {
		return nil, err
	}
	hops := 0
	canon, err := r.canonical(ctx, c, abs, true, &hops)
	if err != nil {
		return nil, err
	}
	if r.lex != "" && !Within(r.canon, canon) {
		return nil, fmt.Errorf("%s resolves to %s: %w", abs, canon, ErrOutside)
	}
	base, baseCanon := "/", "/"
	if Within(r.home, abs) {
		if baseCanon, err = r.canonDir(ctx, c, r.home, &hops); err != nil {
			return nil, err
		}
		base = r.home
	}
	if r.lex != "" && len(r.lex) > len(base) && Within(r.lex, abs) {
		base, baseCanon = r.lex, r.canon
	}
	if want := path.Join(baseCanon, strings.TrimPrefix(abs, base)); canon != want {
		return nil, fmt.Errorf("%s resolves to %s through a symbolic link below %s (share %s instead): %w", abs, canon, base, canon, ErrLinkedRoot)
	}
	return &Root{home: r.home, lex: abs, canon: canon, dirs: map[string]string{}}, nil
}
