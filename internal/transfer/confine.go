package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/confine"
)

// tempMode is the mode of a temporary file until it is renamed into place: owner-only.
const tempMode os.FileMode = 0o600

// checkConcurrency bounds the item checks in flight per run.
const checkConcurrency = 64

// ownerRWX is what a directory needs while the transfer writes into it.
const ownerRWX = 0o700

// setupRoots builds the run's root_dir confinement of both systems (once per run; a Root
// remembers resolved directories, so it does not outlive the run).
func (r *run) setupRoots(ctx context.Context, sc, dc *sftp.Client) error {
	srcHome, err := sc.Getwd()
	if err != nil {
		return fmt.Errorf("source home directory: %w", err)
	}
	dstHome, err := dc.Getwd()
	if err != nil {
		return fmt.Errorf("destination home directory: %w", err)
	}
	if r.srcRoot, err = confine.New(ctx, sc, srcHome, r.src.RootDir); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if r.dstRoot, err = confine.New(ctx, dc, dstHome, r.dst.RootDir); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	// A share's path that resolves outside the root, or through a symlink (confine.Narrow), is
	// refused for good: retrying would only meet it again.
	if r.src.Within != "" {
		if r.srcRoot, err = r.srcRoot.Narrow(ctx, sc, r.src.Within); err != nil {
			return confined(fmt.Errorf("source: %w", err))
		}
	}
	if r.dst.Within != "" {
		if r.dstRoot, err = r.dstRoot.Narrow(ctx, dc, r.dst.Within); err != nil {
			return confined(fmt.Errorf("destination: %w", err))
		}
	}
	return nil
}

// confined classifies a confine error: a path outside the root or an invalid one is permanent.
func confined(err error) error {
	if errors.Is(err, confine.ErrOutside) || errors.Is(err, confine.ErrInvalid) {
		return permanent(err)
	}
	return err
}

// checkItem keeps one item inside both systems' root directories, judged now (not only when the
// transfer was planned): its source with every symlink followed (a symlink item itself is not),
// its destination through an existing symlink at its name (which must not lead out either), and
// a symlink item's target as the destination will resolve it (confine.Root.CheckLink).
func (r *run) checkItem(ctx context.Context, sc, dc *sftp.Client, it *Item) error {
	if err := r.srcRoot.Check(ctx, sc, it.Source, it.Kind != KindSymlink); err != nil {
		return confined(fmt.Errorf("source: %w", err))
	}
	if err := r.dstRoot.Check(ctx, dc, it.Destination, it.Kind != KindSymlink); err != nil {
		return confined(fmt.Errorf("destination: %w", err))
	}
	if it.Kind == KindSymlink {
		// Resolved on the destination from the link's directory, not cleaned lexically: a ".."
		// after a symlink is not the lexical parent (see confine.Root.CheckLink).
		if err := r.dstRoot.CheckLink(ctx, dc, it.Destination, it.linkTarget); err != nil {
			return confined(fmt.Errorf("destination: %w", err))
		}
	}
	return nil
}

// checkItems runs checkItem for items over stream s and fails (and records) those that do not
// pass; it returns the others.
func (r *run) checkItems(ctx context.Context, s *stream, items []*Item) ([]*Item, error) {
	if !r.srcRoot.Confined() && !r.dstRoot.Confined() {
		return items, nil
	}
	ok := make([]bool, len(items))
	// Checks are a stat or two each on the streams' SFTP channels, which pipeline requests:
	// many at once hide the round trips.
	forEach(items, checkConcurrency, func(i int, it *Item) {
		sc, dc, err := s.clients(ctx)
		if err == nil {
			err = r.checkItem(ctx, sc, dc, it)
		}
		if err != nil {
			s.fail(err)
			r.itemFailed(ctx, it, err)
			return
		}
		ok[i] = true
	})
	var pass, refused []*Item
	for i, it := range items {
		if ok[i] {
			pass = append(pass, it)
		} else {
			refused = append(refused, it)
		}
	}
	if len(refused) > 0 {
		if err := r.save(ctx, refused); err != nil {
			return nil, err
		}
	}
	return pass, nil
}

// createTemp creates a transfer's temporary file exclusively and owner-only (see
// createTempNoWait), waiting for the fchmod's reply.
func createTemp(dc *sftp.Client, tmp string) (*sftp.File, error) {
	f, chmodded, err := createTempNoWait(dc, tmp)
	if err != nil {
		return nil, err
	}
	if err := chmodded(); err != nil {
		_ = f.Close()
		_ = dc.Remove(tmp)
		return nil, err
	}
	return f, nil
}

// createTempNoWait creates a transfer's temporary file exclusively and owner-only. The name is
// fixed per item and transfer (so a resumed transfer finds it), so an entry already there, left
// by an earlier attempt or planted, is removed (never opened or followed: a symlink is removed,
// not its target) and the exclusive create is tried once more. The create asks for the
// owner-only mode in its SSH_FXP_OPEN (OpenSSH's sftp-server creates the file with it, narrowed
// by its umask), and the fchmod that makes sure of it on a server that ignored that is sent at
// once, ahead of every request the caller makes on the handle (OpenSSH's sftp-server handles
// them in order), without waiting for its reply: chmodded waits for it. The caller must call
// chmodded, and must neither rename the file into place nor keep it unless it returns nil.
func createTempNoWait(dc *sftp.Client, tmp string) (f *sftp.File, chmodded func() error, err error) {
	const flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	f, err = dc.OpenFilePerm(tmp, flags, tempMode)
	if err != nil {
		if _, lerr := dc.Lstat(tmp); lerr != nil {
			return nil, nil, fmt.Errorf("create %s: %w", tmp, err)
		}
		if rerr := dc.Remove(tmp); rerr != nil {
			return nil, nil, fmt.Errorf("create %s: %w (and removing what is there: %v)", tmp, err, rerr)
		}
		if f, err = dc.OpenFilePerm(tmp, flags, tempMode); err != nil {
			return nil, nil, fmt.Errorf("create %s: %w", tmp, err)
		}
	}
	wait := f.ChmodNoWait(tempMode)
	return f, func() error {
		if err := wait(); err != nil {
			return fmt.Errorf("chmod %s: %w", tmp, err)
		}
		return nil
	}, nil
}

// openTemp opens an existing temporary file to resume writing it, refusing anything but a
// regular file at its name (a symlink there is not followed).
func openTemp(dc *sftp.Client, tmp string) (*sftp.File, error) {
	fi, err := dc.Lstat(tmp)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("temporary file %s is not a regular file: %w", tmp, fs.ErrNotExist)
	}
	return dc.OpenFile(tmp, os.O_WRONLY)
}

// dirMode is the mode a directory item gets when it is created: the source's, with the owner
// able to write into it until the transfer ends.
func dirMode(it *Item) os.FileMode {
	return os.FileMode(it.mode | ownerRWX)
}

// finishDirs gives directories whose source mode denies their owner something (e.g. 0555) that
// mode once nothing more is written into them, deepest first.
func (r *run) finishDirs(ctx context.Context) {
	var dirs []*Item
	r.mu.Lock()
	for _, it := range r.items {
		if it.Kind == KindDir && it.Status == ItemDone && it.mode != 0 && it.mode&ownerRWX != ownerRWX {
			dirs = append(dirs, it)
		}
	}
	r.mu.Unlock()
	if len(dirs) == 0 || len(r.streams) == 0 {
		return
	}
	sort.Slice(dirs, func(i, j int) bool {
		return strings.Count(dirs[i].Destination, "/") > strings.Count(dirs[j].Destination, "/")
	})
	_, dc, err := r.streams[0].clients(ctx)
	if err != nil {
		r.e.log.Warn("transfer: setting directory modes", "id", r.t.ID, "err", err)
		return
	}
	// chmod follows a symlink: under the guard, each directory is judged afresh first, so a
	// directory swapped for a link since it was made cannot lead the chmod out of the root.
	ctx, release, err := r.hold(ctx)
	if err != nil {
		r.e.log.Warn("transfer: setting directory modes", "id", r.t.ID, "err", err)
		return
	}
	defer release()
	for _, it := range dirs {
		if ctx.Err() != nil { // the guard was lost: what is left is not judged any more
			r.e.log.Warn("transfer: setting directory modes", "id", r.t.ID, "err", context.Cause(ctx))
			return
		}
		if err := r.dstRoot.Check(ctx, dc, it.Destination, true); err != nil {
			r.e.log.Warn("transfer: setting directory mode", "id", r.t.ID, "dir", it.Destination, "err", err)
			continue
		}
		if err := dc.Chmod(it.Destination, os.FileMode(it.mode)); err != nil {
			r.e.log.Warn("transfer: setting directory mode", "id", r.t.ID, "dir", it.Destination, "err", err)
		}
	}
}
