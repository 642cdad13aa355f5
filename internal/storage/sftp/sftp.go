// Package sftp is the storage backend for a file system reached over SFTP: an adapter that puts
// package files (which does every SFTP operation, with root_dir and grant confinement) behind
// the storage.Backend interface. Everything an SSH host's file system has is declared:
// directories, atomic rename (posix-rename@openssh.com), modes, symlinks, copies and commands on
// the server.
//
// A backend made with NewStriped spreads each upload's parts over several SFTP channels (see
// striped.go): one channel moves at most its window (2 MiB with OpenSSH) per round trip, about
// 40 MB/s at 50 ms, so a large file written through one would be bounded by it.
package sftp

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/storage"
)

// Backend is a storage.Backend on one files.FS (one system, one user, one request or transfer).
type Backend struct {
	fs   *files.FS
	root string // the remote directory that is the backend's "/"
	// stripe are the channels an upload's parts go over, stripe[0] == fs (see NewStriped).
	stripe []*files.FS
}

var _ storage.Backend = (*Backend)(nil)

// New returns the backend for fsys whose "/" is the remote directory root (absolute; "/" for
// the whole file system, a system's root_dir, a test's directory).
func New(fsys *files.FS, root string) *Backend {
	return &Backend{fs: fsys, root: path.Clean("/" + root), stripe: []*files.FS{fsys}}
}

// remote is the remote path of backend path p.
func (b *Backend) remote(p string) string { return path.Join(b.root, path.Clean("/"+p)) }

// local is the backend path of remote path p (below the root).
func (b *Backend) local(p string) string {
	if b.root == "/" {
		return p
	}
	if rel := strings.TrimPrefix(p, b.root); rel != "" {
		return rel
	}
	return "/"
}

// Capabilities implements storage.Backend.
func (b *Backend) Capabilities() storage.Capabilities {
	return storage.Capabilities{Kind: "sftp", Has: []storage.Capability{storage.Directories, storage.AtomicRename,
		storage.Modes, storage.Symlinks, storage.ServerCopy, storage.Commands, storage.ResumableUploads}}
}

// entry converts a files.Entry.
func (b *Backend) entry(e *files.Entry) *storage.Entry {
	mode, _ := strconv.ParseUint(e.Mode, 8, 32)
	p := b.local(e.Path)
	return &storage.Entry{Path: p, Name: path.Base(p), Type: storage.Type(e.Type), Size: e.Size, ModTime: e.ModTime,
		Mode: os.FileMode(mode)}
}

// Stat implements storage.Backend.
func (b *Backend) Stat(ctx context.Context, p string) (*storage.Entry, error) {
	e, err := b.fs.Stat(ctx, b.remote(p), false)
	if err != nil {
		return nil, err
	}
	return b.entry(e), nil
}

// List implements storage.Backend with keyset paging: the cursor is the last name returned.
func (b *Backend) List(ctx context.Context, dir, cursor string, limit int) (*storage.Page, error) {
	l, err := b.fs.List(ctx, b.remote(dir), files.ListOptions{Limit: limit, After: cursor, ShowHidden: true})
	if err != nil {
		return nil, err
	}
	page := &storage.Page{Entries: make([]storage.Entry, 0, len(l.Entries))}
	for i := range l.Entries {
		page.Entries = append(page.Entries, *b.entry(&l.Entries[i]))
	}
	if l.NextAfter != "" || l.NextOffset != 0 {
		page.Next = l.Entries[len(l.Entries)-1].Name
	}
	return page, nil
}

// Open implements storage.Backend.
func (b *Backend) Open(ctx context.Context, p string, off, n int64, etag string) (io.ReadCloser, error) {
	if etag != "" { // its entries carry no ETag: no version can be asked for
		return nil, fmt.Errorf("read %s as version %s: %w", p, etag, storage.ErrChanged)
	}
	f, e, err := b.fs.OpenRead(ctx, b.remote(p))
	if err != nil {
		return nil, err
	}
	if n < 0 {
		n = max(e.Size-off, 0)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, n), f}, nil
}

// Create implements storage.Backend.
func (b *Backend) Create(ctx context.Context, p string, opts storage.UploadOptions) (storage.Upload, error) {
	u, err := b.fs.CreateParts(ctx, b.remote(p), opts.Overwrite, opts.Parents)
	if err != nil {
		return nil, err
	}
	return b.newUpload(u, b.remote(p)), nil
}

// Resume implements storage.Backend: id is the temporary file's name, which must still exist;
// a known part is kept when it lies within the file (the temporary file is sized by the
// writes, and pkg/sftp's concurrent writes complete a part before WritePart returns).
func (b *Backend) Resume(ctx context.Context, p, id string, known []storage.Part, opts storage.UploadOptions) (storage.Upload, error) {
	u, size, err := b.fs.ResumeParts(ctx, b.remote(p), id, opts.Overwrite)
	if err != nil {
		return nil, err
	}
	up := b.newUpload(u, b.remote(p))
	for _, k := range known {
		if k.Number >= 1 && k.Offset >= 0 && k.Offset+k.Size <= size {
			u.Adopt(k.Number, k.Offset, k.Size)
			up.parts[k.Number] = k
		}
	}
	return up, nil
}

// Remove implements storage.Backend.
func (b *Backend) Remove(ctx context.Context, p string, recursive bool) error {
	return b.fs.Remove(ctx, b.remote(p), recursive)
}

// Mkdir implements storage.Backend.
func (b *Backend) Mkdir(ctx context.Context, p string, parents bool) error {
	return b.fs.Mkdir(ctx, b.remote(p), parents)
}

// Rename implements storage.Backend (atomic on the server).
func (b *Backend) Rename(ctx context.Context, from, to string, overwrite bool) error {
	return b.fs.Move(ctx, b.remote(from), b.remote(to), overwrite)
}

// Copy implements storage.Backend with cp on the server.
func (b *Backend) Copy(ctx context.Context, from, to string, overwrite bool) error {
	return b.fs.Copy(ctx, b.remote(from), b.remote(to), files.CopyOptions{Overwrite: overwrite})
}
