// Package storage is the one interface between sshapi's file operations and the places files
// live: an SSH host's file system over SFTP (package storage/sftp) and an S3 bucket (package
// storage/s3). File routes, links, archives and transfers are meant to speak to a Backend and
// never to a protocol; what one kind of storage cannot do is a Capability it does not declare and
// an *UnsupportedError naming it, never a silent emulation that pretends.
//
// # Contract
//
// Paths are absolute and clean ("/", "/a/b"), relative to the backend's root (an SFTP system's
// root_dir or "/", a bucket and its optional prefix); the caller has resolved and confined them.
// A Backend is safe for concurrent use. Failures wrap fs.ErrNotExist, fs.ErrExist,
// fs.ErrPermission, ErrNotDir, ErrIsDir, ErrNotEmpty, or *UnsupportedError; anything else is the
// server's or the network's.
//
// Writes go through an Upload: parts are written (concurrently, in any order) and nothing is
// visible at the path until Commit; Abort, or a failed Commit, leaves nothing behind (no
// temporary file, no incomplete multipart upload). That is what lets a transfer move large files
// as striped parts into either kind of storage and resume by part.
//
// An Upload outlives the process that started it: its ID, kept by the caller (a transfer keeps
// it in its database with the parts it saw finish), lets Resume reopen it after a crash or a
// restart of either side. Resume confirms the caller's record against what the server holds
// (S3: ListParts, a part kept only with the same size and checksum; SFTP: the temporary file
// survives and covers the part), so a part is never trusted only because the caller says so,
// and Abort of the resumed upload removes it, which is how leftovers of a crashed instance are
// reaped.
//
// Every backend passes the contract suite in package storage/storagetest against a real server.
package storage

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Errors a backend wraps besides fs.ErrNotExist, fs.ErrExist and fs.ErrPermission.
var (
	// ErrNotDir: a path component, or the target of a listing, is not a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a directory where a file was required.
	ErrIsDir = errors.New("is a directory")
	// ErrNotEmpty: a non-recursive removal of a directory that has entries.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrChanged: a file is no longer the version a conditional operation named.
	ErrChanged = errors.New("file changed")
)

// Capability names something a backend may or may not do.
type Capability string

// The capabilities.
const (
	// Directories: directories exist by themselves (an empty one too). Without it a directory
	// is only the common prefix of the keys below it.
	Directories Capability = "directories"
	// AtomicRename: Rename replaces the name in one atomic step. Without it (S3) Rename is a
	// server-side copy followed by a delete: others may see both names, or neither, meanwhile.
	AtomicRename Capability = "atomic_rename"
	// Modes: permission bits can be read and set.
	Modes Capability = "modes"
	// Symlinks: symbolic links exist and are reported as such.
	Symlinks Capability = "symlinks"
	// ServerCopy: Copy runs on the server; the data does not pass through sshapi.
	ServerCopy Capability = "server_copy"
	// Commands: shell commands can run beside the files (checksums and tar on the server).
	Commands Capability = "commands"
	// ResumableUploads: the API's tus endpoint (/v1/systems/{id}/uploads) can write to it. It
	// writes SFTP part files, so only the SFTP backend has it.
	ResumableUploads Capability = "resumable_uploads"
)

// Capabilities is what a backend declares about itself.
type Capabilities struct {
	// Kind is the backend's kind: "sftp" or "s3".
	Kind string `json:"kind"`
	// Has lists the capabilities the backend has.
	Has []Capability `json:"capabilities"`
	// MinPartSize is the smallest part an Upload accepts, except its last (0: no minimum).
	MinPartSize int64 `json:"min_part_size"`
	// MaxPartSize is the largest part an Upload accepts (0: no maximum).
	MaxPartSize int64 `json:"max_part_size"`
	// MaxParts is the most parts one Upload may have (0: no maximum).
	MaxParts int `json:"max_parts"`
}

// Can reports whether c lists capability x.
func (c Capabilities) Can(x Capability) bool {
	for _, h := range c.Has {
		if h == x {
			return true
		}
	}
	return false
}

// UnsupportedError is an operation the backend cannot do, naming the capability it lacks.
type UnsupportedError struct {
	Kind       string
	Capability Capability
	Op         string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: %s storage has no %s", e.Op, e.Kind, e.Capability)
}

// Unwrap makes an UnsupportedError match errors.ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return errors.ErrUnsupported }

// Type is what an entry is.
type Type string

// The types.
const (
	TypeFile    Type = "file"
	TypeDir     Type = "dir"
	TypeSymlink Type = "symlink"
	TypeOther   Type = "other"
)

// Entry describes one file, directory or link.
type Entry struct {
	// Path is the entry's absolute path in the backend; Name its last element ("/" for the root).
	Path string
	Name string
	Type Type
	// Size is the byte size of a file (0 for a directory the backend does not size).
	Size int64
	// ModTime is the last modification (zero when unknown, e.g. an S3 common prefix).
	ModTime time.Time
	// Mode holds permission bits where the backend has Modes.
	Mode os.FileMode
	// ETag identifies a file's content version where the backend has one.
	ETag string
	// Checksum is the server's own SHA-256 of the content where it keeps one, base64 as S3
	// gives it: the whole object's, or for a multipart object the COMPOSITE value
	// base64(sha256(part sums))+"-N" (see CompositeSHA256). Empty when the server keeps none.
	Checksum string
}

// Page is one page of a directory's entries, in the backend's order (names ascending for both
// kinds here). Next, when not empty, is the cursor of the following page.
type Page struct {
	Entries []Entry
	Next    string
}

// UploadOptions tunes Create.
type UploadOptions struct {
	// Size is the final size when known (-1 when not): a backend may pick a single request for a
	// small object.
	Size int64
	// Overwrite allows replacing an existing file at the path.
	Overwrite bool
	// Parents makes missing parent directories. Without it a backend with Directories refuses
	// a missing parent with fs.ErrNotExist; a backend without them has no parents to miss.
	Parents bool
}

// Part is one finished part of an Upload.
type Part struct {
	// Number is the part's number (from 1); Offset and Size place it in the file.
	Number int
	Offset int64
	Size   int64
	// ETag is the server's tag of the part (S3), empty where there is none.
	ETag string
	// SHA256 is the part's digest.
	SHA256 []byte
}

// Upload is a write in progress at one path. Parts are numbered from 1 and laid out in number
// order without gaps: part n starts where part n-1 ends. Each but the last must be at least
// MinPartSize. A small upload (UploadOptions.Size at most MinPartSize, written as one part) may
// be kept by the backend and stored with one request at Commit, so that nothing is on the
// server before; calling ID first makes it an ordinary resumable upload. WritePart may be called concurrently and a part may be written again (the last
// write counts), which is how a resumed transfer redoes an unfinished part.
type Upload interface {
	// WritePart stores part n, the size bytes read from r that belong at offset off of the
	// file. sha256, when not nil, is the part's digest: the bytes are refused (by the server
	// where it can check, else by the backend) if they do not match.
	WritePart(ctx context.Context, n int, off int64, r io.Reader, size int64, sha256 []byte) error
	// Commit makes the parts, in number order, the file at the path. Every part from 1 to the
	// highest must have been written.
	Commit(ctx context.Context) (*Entry, error)
	// Abort discards the parts; nothing of the upload is left.
	Abort(ctx context.Context) error
	// ID names the upload for Backend.Resume, starting it on the server if that has not
	// happened yet (S3: CreateMultipartUpload), so that a caller can record it before the
	// first part and reap it after a crash.
	ID(ctx context.Context) (string, error)
	// Parts lists the parts known finished, in number order: those written through this
	// Upload and, after Resume, those the server confirmed.
	Parts() []Part
}

// Backend is a place files live.
type Backend interface {
	// Capabilities declares what the backend can do.
	Capabilities() Capabilities
	// Stat describes the entry at p (a symlink itself, not its target).
	Stat(ctx context.Context, p string) (*Entry, error)
	// List returns up to limit entries of directory dir after cursor ("" for the first page),
	// without loading the whole directory.
	List(ctx context.Context, dir, cursor string, limit int) (*Page, error)
	// Open reads n bytes of file p from offset off (n < 0: to the end). etag, when not empty,
	// is the version (Entry.ETag) the bytes must come from: if p is now another version the
	// answer is ErrChanged and nothing is read, so that several reads of one file (ranges,
	// parts, a Stat's size and then its bytes) never mix two versions. A backend whose entries
	// carry no ETag refuses a non-empty etag with ErrChanged.
	Open(ctx context.Context, p string, off, n int64, etag string) (io.ReadCloser, error)
	// Create starts an Upload that will become file p.
	Create(ctx context.Context, p string, opts UploadOptions) (Upload, error)
	// Resume reopens the upload id (Upload.ID) to file p. known are the parts the caller saw
	// finish; the backend keeps those it can confirm on the server (see the package
	// documentation) and the returned Upload's Parts lists them. An upload that is gone
	// (committed, aborted, expired, its temporary file removed) wraps fs.ErrNotExist.
	Resume(ctx context.Context, p, id string, known []Part, opts UploadOptions) (Upload, error)
	// Remove removes file p, or directory p (with everything below it when recursive; a
	// non-empty directory without recursive is ErrNotEmpty).
	Remove(ctx context.Context, p string, recursive bool) error
	// Mkdir makes directory p (with its parents when parents; then an existing directory is
	// not an error).
	Mkdir(ctx context.Context, p string, parents bool) error
	// Rename moves file from to to (replacing a file there only with overwrite). Without
	// AtomicRename it is a copy and a delete (see AtomicRename).
	Rename(ctx context.Context, from, to string, overwrite bool) error
	// Copy copies file from to to.
	Copy(ctx context.Context, from, to string, overwrite bool) error
}

// CrossCopier is a Backend that can copy a file from another backend on its own server, the
// data never passing through sshapi (S3: CopyObject between two buckets of one server reached
// with one credential).
type CrossCopier interface {
	// CanCopyFrom reports whether CopyFrom can copy from src (it makes no request).
	CanCopyFrom(src Backend) bool
	// CopyFrom copies file from of src to file to of this backend (replacing a file there),
	// only while from's version is etag when etag is not empty (else ErrChanged), and returns
	// the copy's entry. ok is false, and nothing was done, when src is not on the same server
	// with the same credential.
	CopyFrom(ctx context.Context, src Backend, from, to, etag string) (e *Entry, ok bool, err error)
}

// CompositeSHA256 is the checksum S3 reports for a multipart object made of parts with the
// given SHA-256 digests, in order: base64(sha256(sum1 || sum2 || ...)) followed by "-N".
func CompositeSHA256(sums [][]byte) string {
	h := sha256.New()
	for _, s := range sums {
		h.Write(s)
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(len(sums))
}
