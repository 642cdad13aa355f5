package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
)

// Entry types reported in Entry.Type.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// MaxRecursiveEntries bounds a recursive listing: it is sorted in memory, so a larger tree must
// be listed directory by directory (or narrowed with a pattern).
const MaxRecursiveEntries = 200_000

// linkWorkers bounds the concurrent readlink requests of one listing.
const linkWorkers = 32

// Entry describes one remote file as the API reports it.
type Entry struct {
	// Name is the base name; in a recursive listing, the path relative to the listed directory.
	Name string `json:"name"`
	// Path is the absolute remote path.
	Path string `json:"path"`
	// Type is TypeFile, TypeDir, TypeSymlink or TypeOther.
	Type string `json:"type"`
	// Size in bytes.
	Size int64 `json:"size"`
	// Mode is the permission bits in octal, with setuid/setgid/sticky, e.g. "0644" or "4755".
	Mode string `json:"mode"`
	// ModTime is the last modification time.
	ModTime time.Time `json:"mtime"`
	// UID and GID are the numeric owner and group (SFTP v3 carries no names).
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// LinkTarget is the symlink's target as stored, for symlinks only.
	LinkTarget string `json:"link_target,omitempty"`
}

// ListOptions selects and pages a listing.
type ListOptions struct {
	// Limit is the page size; 0 means everything from Offset on.
	Limit int
	// Offset is the number of matching entries to skip (after After, when given).
	Offset int
	// After, when set, starts the page after this name: keyset paging, which costs the same
	// memory on every page however deep into a large directory it is.
	After string
	// Pattern, when set, keeps entries whose base name matches it (path.Match syntax).
	Pattern string
	// Recursive lists the whole tree below the directory, without following symlinks.
	Recursive bool
	// ShowHidden includes names starting with "." (and, recursively, their contents).
	ShowHidden bool
	// Sort orders the listing: SortName (the default), SortSize or SortTime, ties broken by
	// name. After (keyset paging) needs SortName ascending; other orders page by Offset.
	Sort SortKey
	// Desc reverses the order.
	Desc bool
	// Snapshots, when set, keeps a large directory's listing for the next pages and orders
	// (see listsnap.go), for callers with the same SnapshotID: the connection identity the
	// listing runs as (system and credential). SnapshotOwner is the share its memory is
	// charged to. Recursive listings are never kept.
	Snapshots     *Snapshots
	SnapshotID    string
	SnapshotOwner string

	namesOnly bool // entries may be read without their attributes (see FS.fillAttrs)
	// read, when set, is the directory's entries already read whole (by fromSnapshot, at the
	// same time as the stat that decided it is small): eachEntry walks them instead of
	// reading the directory again.
	read *[]os.FileInfo
}

// Listing is one page of a directory listing.
type Listing struct {
	// Path is the absolute path of the listed directory.
	Path string `json:"path"`
	// Entries are sorted by Name (bytewise), or as ListOptions.Sort and Desc ask.
	Entries []Entry `json:"entries"`
	// Total is the number of entries matching the options, across all pages.
	Total int `json:"total"`
	// NextOffset is the Offset of the next page, 0 when this page is the last.
	NextOffset int `json:"next_offset,omitempty"`
	// NextAfter is the After of the next page (with Offset 0), "" when this page is the last.
	NextAfter string `json:"next_after,omitempty"`

	more bool // entries follow this page
}

// List lists directory p: one READDIR sequence per directory, readlink only for the symlinks on
// the returned page (concurrently). Dangling symlinks are listed like any other. A directory
// listing holds at most Offset+Limit entries however large the directory is (a bounded heap
// keeps the first ones in name order); a large directory is read batch by batch over a channel
// of its own (see Options.StreamDirBytes).
func (f *FS) List(ctx context.Context, p string, opts ListOptions) (*Listing, error) {
	const op = "list"
	if opts.Limit < 0 || opts.Offset < 0 {
		return nil, newErr(op, p, ErrInvalid, errors.New("negative limit or offset"))
	}
	if opts.Pattern != "" {
		if _, err := path.Match(opts.Pattern, ""); err != nil {
			return nil, newErr(op, p, ErrInvalid, fmt.Errorf("pattern %q: %w", opts.Pattern, err))
		}
	}
	dir, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return nil, err
	}
	window := opts.Offset + opts.Limit
	if opts.Limit == 0 || window > MaxRecursiveEntries {
		window = MaxRecursiveEntries
	}
	if opts.After != "" && (opts.Desc || (opts.Sort != "" && opts.Sort != SortName)) {
		return nil, newErr(op, p, ErrInvalid, errors.New("after pages a listing sorted by name ascending only"))
	}
	var b *builder
	if opts.Snapshots != nil && opts.SnapshotID != "" && !opts.Recursive {
		l, nb, read, wait, err := f.fromSnapshot(ctx, dir, opts)
		if wait != nil {
			defer wait()
		}
		if l != nil || err != nil {
			return l, err
		}
		b, opts.read = nb, read
	}
	l := &Listing{Path: dir}
	top := newSortedTopK(window, opts.After, opts.Sort, opts.Desc)
	add := top.add
	if b != nil {
		add = func(d *dirent, name []byte, abs string) {
			top.add(d, name, abs)
			b.add(d, name, abs)
		}
	}
	if opts.Recursive {
		err = f.walkList(ctx, dir, opts, add)
	} else {
		// In name order the names alone choose a page; only its entries are stat'ed. A page
		// that may hold more than namesOnlyMaxWindow entries reads them with their attributes
		// instead: one lstat per entry would cost more than the attributes in the listing.
		opts.namesOnly = (opts.Sort == "" || opts.Sort == SortName) && window <= namesOnlyMaxWindow
		err = f.eachEntry(ctx, op, dir, "", opts, add)
	}
	if b != nil {
		if err == nil && top.total >= snapshotMinEntries {
			b.finish()
		} else {
			b.abandon()
		}
	}
	if err != nil {
		return nil, err
	}
	l.Entries = top.page(dir, opts.Offset)
	l.Total, l.more = top.total, top.more
	if l.more && len(l.Entries) > 0 {
		l.NextOffset = opts.Offset + len(l.Entries)
		l.NextAfter = l.Entries[len(l.Entries)-1].Name
	}
	if err := f.fillAttrs(ctx, l.Entries); err != nil {
		return nil, wrap(op, dir, err)
	}
	if err := f.readLinks(ctx, l.Entries); err != nil {
		return nil, wrap(op, dir, err)
	}
	return l, nil
}

// fillAttrs lstats, concurrently, the entries listed by name and type only (Mode ""). An
// entry gone meanwhile keeps its name and type, with zero attributes.
func (f *FS) fillAttrs(ctx context.Context, entries []Entry) error {
	var idx []int
	for i := range entries {
		if entries[i].Mode == "" {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	return forEach(ctx, min(attrWorkers, len(idx)), idx, func(i int) error {
		e := &entries[i]
		fi, err := f.c.Lstat(e.Path)
		if errors.Is(err, fs.ErrNotExist) {
			e.Mode = modeString(0)
			return nil
		}
		if err != nil {
			return wrap("lstat", e.Path, err)
		}
		*e = entryFromInfo(e.Path, e.Name, fi)
		return nil
	})
}

// namesOnlyMaxWindow is the largest window (offset + limit) of a name-ordered listing that reads
// names and types only and lstats its page (see fillAttrs): the UI's pages of 200 cost 200
// lstats, not the attributes of a whole large directory, while a listing of everything reads
// the attributes with the names.
const namesOnlyMaxWindow = 1000

// attrWorkers bounds the concurrent lstat requests of one page (SFTP pipelines them on one
// channel: a 200-entry page costs about one round trip per 200/attrWorkers).
const attrWorkers = 128

// snapshotMinEntries: a directory with fewer entries is listed again for every page rather
// than kept (listing it costs about what one page does).
const snapshotMinEntries = 2000

// fromSnapshot answers the page opts asks for of directory dir from opts.Snapshots when it
// holds a listing that may be served (see listsnap.go). Otherwise it returns a builder to
// collect this listing with (nil when the directory is small or changed too recently) and,
// for a small directory, its entries: the directory is read on the shared channel at the same
// time as the stat that dates it (a small directory costs the one stat the listing makes
// anyway, not a round trip of its own before the read); the read is abandoned when the stat
// says the directory is large or kept, and the caller must then call wait (when not nil) before
// it returns, as the abandoned read winds down meanwhile.
func (f *FS) fromSnapshot(ctx context.Context, dir string, opts ListOptions) (l *Listing, b *builder, read *[]os.FileInfo, wait func(), err error) {
	if err := checkCtx(ctx, "list", dir); err != nil {
		return nil, nil, nil, nil, err
	}
	k := snapKey{id: opts.SnapshotID, dir: dir, pattern: opts.Pattern, hidden: opts.ShowHidden}
	var (
		sn    *snapshot
		stamp dirStamp
		small bool
	)
	fi, infos, readErr, wait, err := f.statReading(ctx, dir, f.opts.StreamDirBytes > 0, func(fi os.FileInfo) bool {
		stamp = dirStamp{mtime: fi.ModTime().Unix(), size: fi.Size()}
		if sn = opts.Snapshots.lookup(k, stamp, opts.Sort); sn != nil {
			return false
		}
		small = fi.Size() <= f.opts.StreamDirBytes && f.opts.StreamDirBytes > 0
		return small
	})
	if err != nil || !fi.IsDir() {
		return nil, nil, nil, wait, nil // List reports it as it always has
	}
	if sn != nil {
		l = snapshotPage(sn, dir, opts)
		if err := f.fillAttrs(ctx, l.Entries); err != nil {
			return nil, nil, nil, wait, wrap("list", dir, err)
		}
		if err := f.readLinks(ctx, l.Entries); err != nil {
			return nil, nil, nil, wait, wrap("list", dir, err)
		}
		return l, nil, nil, wait, nil
	}
	if small {
		if readErr != nil {
			return nil, nil, nil, wait, f.dirErr(ctx, "list", dir, readErr)
		}
		if infos == nil {
			return nil, nil, nil, wait, nil // not read at the same time: List reads it
		}
		return nil, nil, &infos, wait, nil
	}
	return nil, opts.Snapshots.newBuilder(k, opts.SnapshotOwner, stamp), nil, wait, nil
}

// statReading stats directory dir and, when read is set, reads it whole on the shared channel at
// the same time. keep, called with the stat's answer when the stat succeeds, says whether the
// read is wanted: when it is not, the read is abandoned and winds down (its last READDIR and
// CLOSE) while the caller goes on, and the caller must call wait (when not nil) before it
// returns. infos and readErr are the read's outcome when it was kept (infos nil otherwise).
func (f *FS) statReading(ctx context.Context, dir string, read bool, keep func(os.FileInfo) bool) (fi os.FileInfo, infos []os.FileInfo, readErr error, wait func(), err error) {
	if !read {
		if fi, err = f.c.Stat(dir); err == nil && fi.IsDir() {
			keep(fi)
		}
		return fi, nil, nil, nil, err
	}
	rd := f.startDirRead(ctx, dir)
	fi, err = f.c.Stat(dir)
	if err != nil || !fi.IsDir() || !keep(fi) {
		return fi, nil, nil, rd.abandon(), err
	}
	infos, readErr = rd.result()
	if infos == nil && readErr == nil {
		infos = []os.FileInfo{}
	}
	return fi, infos, readErr, nil, nil
}

// dirRead is a whole-directory read running on the shared channel beside the caller's other
// requests (see statReading and readSmallDir).
type dirRead struct {
	cancel context.CancelFunc
	done   chan dirReadResult
}

// dirReadResult is a dirRead's outcome.
type dirReadResult struct {
	infos []os.FileInfo
	err   error
}

// startDirRead starts reading directory dir whole; the caller must call result or abandon.
func (f *FS) startDirRead(ctx context.Context, dir string) *dirRead {
	rctx, cancel := context.WithCancel(ctx)
	rd := &dirRead{cancel: cancel, done: make(chan dirReadResult, 1)}
	go func() {
		infos, err := f.c.ReadDirContext(rctx, dir)
		rd.done <- dirReadResult{infos, err}
	}()
	return rd
}

// result waits for the read and returns its outcome.
func (rd *dirRead) result() ([]os.FileInfo, error) {
	r := <-rd.done
	rd.cancel()
	return r.infos, r.err
}

// abandon cancels the read, which winds down (its last READDIR and CLOSE) in the background,
// and returns what waits for that.
func (rd *dirRead) abandon() (wait func()) {
	rd.cancel()
	return func() { <-rd.done }
}

// eachEntry calls fn for every entry of directory dir that passes opts' filters, each named
// prefix+base, with its absolute path when that is not dir joined with the name by a slash
// (see topK.add).
func (f *FS) eachEntry(ctx context.Context, op, dir, prefix string, opts ListOptions, fn func(d *dirent, name []byte, abs string)) error {
	var named []byte
	each := func(fn func(*dirent) error) error { return f.eachDirentOf(ctx, op, dir, opts.namesOnly, fn) }
	if opts.read != nil {
		each = func(fn func(*dirent) error) error { return eachRead(*opts.read, fn) }
	}
	return each(func(d *dirent) error {
		if !opts.ShowHidden && len(d.name) > 0 && d.name[0] == '.' {
			return nil
		}
		if opts.Pattern != "" {
			if ok, _ := path.Match(opts.Pattern, string(d.name)); !ok {
				return nil
			}
		}
		if prefix == "" {
			fn(d, d.name, joinedPath(dir, d.name))
			return nil
		}
		named = append(append(named[:0], prefix...), d.name...)
		fn(d, named, childPath(dir, string(d.name)))
		return nil
	})
}

// dirent is one directory entry as listings read it. Its slices are valid only during the
// callback it is handed to.
type dirent struct {
	name []byte
	st   sftp.FileStat // lstat attributes as SFTP carries them
	link []byte        // the symlink target when the reader got it (find), else empty
}

// direntInfo is a dirent kept as an os.FileInfo; Sys returns the *sftp.FileStat.
type direntInfo struct {
	name string
	st   sftp.FileStat
	link string
}

func newDirentInfo(d *dirent) *direntInfo {
	return &direntInfo{name: string(d.name), st: d.st, link: string(d.link)}
}

func (i *direntInfo) Name() string       { return i.name }
func (i *direntInfo) Size() int64        { return int64(i.st.Size) }
func (i *direntInfo) Mode() os.FileMode  { return i.st.FileMode() }
func (i *direntInfo) ModTime() time.Time { return i.st.ModTime() }
func (i *direntInfo) IsDir() bool        { return i.Mode().IsDir() }
func (i *direntInfo) Sys() any           { return &i.st }

// linkTarget returns the symlink target the reader got, or "".
func (i *direntInfo) linkTarget() string { return i.link }

// setInfo fills d from fi (an entry of pkg/sftp's ReadDir), reusing d's buffers.
func (d *dirent) setInfo(fi os.FileInfo) {
	d.name = append(d.name[:0], fi.Name()...)
	d.link = d.link[:0]
	if st, ok := fi.Sys().(*sftp.FileStat); ok {
		d.st = *st
		return
	}
	d.st = sftp.FileStat{Size: uint64(fi.Size()), Mtime: uint32(fi.ModTime().Unix()), Mode: sftpMode(fi.Mode())}
}

// sftpMode converts m to SFTP's st_mode (what pkg/sftp's FileMode undoes).
func sftpMode(m os.FileMode) uint32 {
	mode := unixPerm(m)
	switch {
	case m&os.ModeCharDevice != 0:
		mode |= sIFCHR
	case m&os.ModeDevice != 0:
		mode |= sIFBLK
	case m.IsDir():
		mode |= sIFDIR
	case m&os.ModeNamedPipe != 0:
		mode |= sIFIFO
	case m&os.ModeSymlink != 0:
		mode |= sIFLNK
	case m&os.ModeSocket != 0:
		mode |= sIFSOCK
	case m.IsRegular():
		mode |= sIFREG
	}
	return mode
}

// childPath is path.Join(dir, name) for a clean absolute dir and a directory entry's name
// (never empty, ".", ".." or holding a slash), without cleaning again.
func childPath(dir, name string) string {
	if name == "" || name == "." || name == ".." || strings.IndexByte(name, '/') >= 0 {
		return path.Join(dir, name) // not from a well-behaved server
	}
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// eachInfo is eachDirent handing out each entry as an os.FileInfo (whose Sys is a
// *sftp.FileStat), for callers that keep entries.
func (f *FS) eachInfo(ctx context.Context, op, dir string, fn func(os.FileInfo) error) error {
	return f.eachDirent(ctx, op, dir, func(d *dirent) error { return fn(newDirentInfo(d)) })
}

// eachDirent calls fn for every entry of directory dir, in the server's order, and stops at
// the first error fn returns. A directory the server reports as larger than
// Options.StreamDirBytes is read by one `find -printf` (Options.ListCommand) or batch by batch
// on an SFTP channel of its own when the Runner can open one (memory: one batch); a smaller
// one with one ReadDir on the shared channel.
func (f *FS) eachDirent(ctx context.Context, op, dir string, fn func(*dirent) error) error {
	return f.eachDirentOf(ctx, op, dir, false, fn)
}

// eachDirentOf is eachDirent; with namesOnly, entries may come with their name and file type
// only (modeUnknown set in st.Mode) when that is cheaper to read.
func (f *FS) eachDirentOf(ctx context.Context, op, dir string, namesOnly bool, fn func(*dirent) error) error {
	ch, streams := f.run.(Channels)
	if !streams || f.opts.StreamDirBytes > 0 {
		infos, big, wait, err := f.readSmallDir(ctx, dir, streams)
		if err != nil {
			return f.dirErr(ctx, op, dir, err)
		}
		if wait != nil {
			defer wait()
		}
		if !big {
			return eachRead(infos, fn)
		}
	}
	if f.opts.ListCommand {
		err := f.findDirents(ctx, dir, namesOnly, fn)
		if !errors.Is(err, errFindUnusable) {
			if err != nil && ctx.Err() == nil {
				return f.dirErr(ctx, op, dir, err)
			}
			return checkCtx(ctx, op, dir)
		}
	}
	d, err := openDirStream(ctx, ch, dir)
	if err != nil {
		return f.dirErr(ctx, op, dir, err)
	}
	defer d.close()
	for {
		err := d.next(fn)
		if errors.Is(err, io.EOF) {
			return checkCtx(ctx, op, dir)
		}
		var ferr callbackError
		if errors.As(err, &ferr) {
			return ferr.err
		}
		if err != nil {
			if cerr := checkCtx(ctx, op, dir); cerr != nil {
				return cerr
			}
			return f.dirErr(ctx, op, dir, err)
		}
	}
}

// eachRead calls fn for every entry of a directory read whole, in the server's order, and stops
// at the first error fn returns.
func eachRead(infos []os.FileInfo, fn func(*dirent) error) error {
	var d dirent
	for _, fi := range infos {
		d.setInfo(fi)
		if err := fn(&d); err != nil {
			return err
		}
	}
	return nil
}

// callbackError carries an error of dirStream.next's callback, returned as it is.
type callbackError struct{ err error }

func (c callbackError) Error() string { return c.err.Error() }

// readSmallDir reads directory dir whole on the shared channel. When check is set it asks for
// the directory's size at the same time (so a small directory costs no extra round trip) and,
// if the size is above Options.StreamDirBytes, abandons the read and reports big at once: the
// caller lists the directory another way while the abandoned read winds down (its last
// READDIR and CLOSE), and must call wait before it returns.
func (f *FS) readSmallDir(ctx context.Context, dir string, check bool) (infos []os.FileInfo, big bool, wait func(), err error) {
	if !check {
		infos, err := f.c.ReadDirContext(ctx, dir)
		return infos, false, nil, err
	}
	rd := f.startDirRead(ctx, dir)
	if fi, err := f.c.Stat(dir); err == nil && fi.IsDir() && fi.Size() > f.opts.StreamDirBytes {
		return nil, true, rd.abandon(), nil
	}
	infos, err = rd.result()
	return infos, false, nil, err
}

// dirErr classifies a failure to open or read directory dir: OpenSSH maps ENOTDIR to
// SSH_FX_NO_SUCH_FILE, so a stat tells a file apart from a missing path.
func (f *FS) dirErr(ctx context.Context, op, dir string, err error) error {
	if ctx.Err() == nil && (isFailure(err) || errors.Is(err, fs.ErrNotExist)) {
		if fi, serr := f.c.Stat(dir); serr == nil && !fi.IsDir() {
			return newErr(op, dir, ErrNotDir, err)
		}
	}
	return wrap(op, dir, err)
}

// walkList calls sink (never concurrently) for every entry of the tree below root that passes
// opts' filters, with linkWorkers workers reading directories from a queue. More than
// MaxRecursiveEntries matching entries, or directories, is refused: the walk's work and its
// queue are bounded, and sink bounds what is kept.
func (f *FS) walkList(ctx context.Context, root string, opts ListOptions, sink func(d *dirent, name []byte, abs string)) error {
	const op = "list"
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type job struct{ dir, prefix string }
	var (
		mu       sync.Mutex // guards everything below and serializes sink
		cond     = sync.NewCond(&mu)
		queue    = []job{{root, ""}}
		active   int
		dirs     int
		listed   int
		firstErr error
	)
	tooMany := newErr(op, root, ErrInvalid, fmt.Errorf("more than %d entries: list directories one by one or narrow the pattern", MaxRecursiveEntries))
	failLocked := func(err error) {
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		cond.Broadcast()
	}
	every := opts
	every.Pattern = "" // every directory is descended into; the pattern selects what is listed
	visit := func(j job) error {
		return f.eachEntry(ctx, op, j.dir, j.prefix, every, func(d *dirent, name []byte, abs string) {
			mu.Lock()
			defer mu.Unlock()
			if firstErr != nil {
				return
			}
			// lstat attributes: a symlink to a directory is not descended into.
			if d.st.Mode&sIFMT == sIFDIR {
				if dirs++; dirs > MaxRecursiveEntries {
					failLocked(tooMany)
					return
				}
				sub := abs
				if sub == "" {
					sub = childPath(j.dir, string(d.name))
				}
				queue = append(queue, job{sub, string(name) + "/"})
				cond.Signal()
			}
			if opts.Pattern != "" {
				if ok, _ := path.Match(opts.Pattern, path.Base(string(name))); !ok {
					return
				}
			}
			if listed++; listed > MaxRecursiveEntries {
				failLocked(tooMany)
				return
			}
			sink(d, name, abs)
		})
	}
	var wg sync.WaitGroup
	for range linkWorkers {
		wg.Go(func() {
			mu.Lock()
			defer mu.Unlock()
			for {
				for len(queue) == 0 && active > 0 && firstErr == nil {
					cond.Wait()
				}
				if firstErr != nil || len(queue) == 0 {
					cond.Broadcast() // done: wake the others to see it
					return
				}
				j := queue[len(queue)-1]
				queue = queue[:len(queue)-1]
				active++
				mu.Unlock()
				err := visit(j)
				mu.Lock()
				active--
				if err != nil {
					failLocked(err)
				}
				if active == 0 && len(queue) == 0 {
					cond.Broadcast()
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return checkCtx(ctx, op, root)
}

// readLinks fills LinkTarget for the symlinks among entries, concurrently.
func (f *FS) readLinks(ctx context.Context, entries []Entry) error {
	var idx []int
	for i := range entries {
		if entries[i].Type == TypeSymlink && entries[i].LinkTarget == "" { // a target is never empty
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	return forEach(ctx, min(linkWorkers, len(idx)), idx, func(i int) error {
		t, err := f.c.ReadLink(entries[i].Path)
		if err != nil {
			return wrap("readlink", entries[i].Path, err)
		}
		entries[i].LinkTarget = t
		return nil
	})
}

// Stat describes p; with followLinks false a symlink is described itself (with LinkTarget).
func (f *FS) Stat(ctx context.Context, p string, followLinks bool) (*Entry, error) {
	const op = "stat"
	abs, err := f.resolve(ctx, op, p, followLinks)
	if err != nil {
		return nil, err
	}
	return f.stat(ctx, op, abs, followLinks)
}

// stat is Stat on a resolved path.
func (f *FS) stat(ctx context.Context, op, abs string, followLinks bool) (*Entry, error) {
	if err := checkCtx(ctx, op, abs); err != nil {
		return nil, err
	}
	var fi os.FileInfo
	var err error
	if followLinks {
		fi, err = f.c.Stat(abs)
	} else {
		fi, err = f.c.Lstat(abs)
	}
	if err != nil {
		return nil, wrap(op, abs, err)
	}
	e := entryFromInfo(abs, path.Base(abs), fi)
	if e.Type == TypeSymlink {
		if e.LinkTarget, err = f.c.ReadLink(abs); err != nil {
			return nil, wrap("readlink", abs, err)
		}
	}
	return &e, nil
}

// exists reports whether abs exists (without following a final symlink). Errors other than
// "does not exist" are returned.
func (f *FS) exists(abs string) (os.FileInfo, bool, error) {
	fi, err := f.c.Lstat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return fi, true, nil
}

// entryFromInfo converts SFTP attributes to an Entry.
func entryFromInfo(abs, name string, fi os.FileInfo) Entry {
	e := Entry{
		Name:    name,
		Path:    abs,
		Type:    typeOf(fi.Mode()),
		Size:    fi.Size(),
		Mode:    modeString(fi.Mode()),
		ModTime: fi.ModTime().UTC(),
	}
	if st, ok := fi.Sys().(*sftp.FileStat); ok {
		e.UID, e.GID = st.UID, st.GID
	}
	if l, ok := fi.(interface{ linkTarget() string }); ok {
		e.LinkTarget = l.linkTarget()
	}
	return e
}

// typeOf maps a mode to an Entry type.
func typeOf(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return TypeFile
	case m.IsDir():
		return TypeDir
	case m&os.ModeSymlink != 0:
		return TypeSymlink
	}
	return TypeOther
}

// ModeString renders permission and setuid/setgid/sticky bits as four octal digits, as
// listings show them ("0644", "2775").
func ModeString(m os.FileMode) string { return modeString(m) }

// modeString renders permission and setuid/setgid/sticky bits as four octal digits.
func modeString(m os.FileMode) string {
	b := unixPerm(m)
	return modeStrings[4*b : 4*b+4]
}

// modeStrings holds every four-digit octal mode from "0000" to "7777", in order.
var modeStrings = func() string {
	b := make([]byte, 0, 4*0o10000)
	for m := range 0o10000 {
		b = append(b, '0'+byte(m>>9&7), '0'+byte(m>>6&7), '0'+byte(m>>3&7), '0'+byte(m&7))
	}
	return string(b)
}()

// unixPerm returns the POSIX permission bits of m, special bits included.
func unixPerm(m os.FileMode) uint32 {
	bits := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}

// forEach calls fn for every item with at most n calls in flight and returns the first error.
// It stops starting new calls after an error or when ctx is done.
func forEach[T any](ctx context.Context, n int, items []T, fn func(T) error) error {
	if n < 1 {
		n = 1
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, n)
	)
	for _, it := range items {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		if err := ctx.Err(); err != nil {
			mu.Lock()
			firstErr = err
			mu.Unlock()
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(it); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}
