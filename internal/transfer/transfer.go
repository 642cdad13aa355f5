// Package transfer moves files and directory trees from one of a user's systems to another:
// striped over several SFTP channels, resumable after a lost connection, a restarted sshd or a
// restarted sshapi, verified end to end with sha256sum on both systems, and run as durable jobs
// on River.
//
// A transfer is planned once (the source is walked and every file, directory and symlink becomes
// an item) and then executed in rounds. A directory's plan is stored a chunk (a tar batch's
// worth of items) at a time, each chunk in one transaction, and the first round copies each
// stored chunk while the walk goes on (plan.go, planRound); a run that resumes an interrupted
// walk keeps the stored items and what was done with them, and adds only the entries no stored
// item has, so no file is copied twice or left out. Confinement does not rest on the walk
// (which never follows a symlink but may pass through a directory swapped for one while it
// runs): every item is checked against both roots just before it moves. Each file is cut into byte ranges of ChunkSize; a file of
// one range is a "small" file and moves in batches, many at once; a larger file's ranges are
// spread over the run's streams, one range in flight per stream, and every finished range is
// recorded, so a resumed run sends only the ranges that were not finished. Data is written to a
// temporary name next to the destination (".name.sshapi-<id>.part") and renamed into place after
// verification. Copies within one system run on the server (cp) without passing data through
// sshapi.
//
// An end whose System has Storage (an S3 bucket) makes the transfer an object transfer
// (SFTP→S3, S3→SFTP, S3→S3): it runs through the storage backends instead, as multipart
// uploads resumable by part and verified by SHA-256 — see object.go for how and why.
//
// The Engine owns the River client, the database and the background goroutines; create it with
// New, Start it, and Stop it.
package transfer

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Status is where a transfer is in its life.
type Status string

// Transfer statuses.
const (
	StatusQueued  Status = "queued"
	StatusRunning Status = "running"
	// StatusRetrying: the run waits to retry after an error (Transfer.Error says which, and
	// NextAttemptAt when the next try starts).
	StatusRetrying  Status = "retrying"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCanceled  Status = "canceled"
)

// Terminal reports whether no more work will happen for a transfer in status s.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCanceled
}

func (s Status) valid() bool {
	switch s {
	case StatusQueued, StatusRunning, StatusRetrying, StatusSucceeded, StatusFailed, StatusCanceled:
		return true
	}
	return false
}

// Sync says when a file that already exists at the destination is skipped.
type Sync string

// Sync levels.
const (
	// SyncAlways copies every file.
	SyncAlways Sync = "always"
	// SyncExists skips files that exist at the destination.
	SyncExists Sync = "exists"
	// SyncSize skips files whose destination has the same size.
	SyncSize Sync = "size"
	// SyncMtime skips files whose destination has the same size and modification time.
	SyncMtime Sync = "mtime"
	// SyncChecksum skips files whose destination has the same sha256.
	SyncChecksum Sync = "checksum"
)

// Verify says how a copied file is checked before it is renamed into place.
type Verify string

// Verification levels.
const (
	VerifyNone   Verify = "none"
	VerifySize   Verify = "size"
	VerifySHA256 Verify = "sha256"
)

// Limits of Request fields.
const (
	MaxStreams       = 16
	MinChunkSize     = 1 << 20
	MaxChunkSize     = 1 << 30
	DefaultChunkSize = 16 << 20
	DefaultDeadline  = 24 * time.Hour
	MaxDeadline      = 30 * 24 * time.Hour
	maxKeyLen        = 200
	maxPathLen       = 4096
)

// Endpoint is one end of a transfer: a system of the caller's and a path on it. Relative paths
// are taken from the remote user's home directory.
type Endpoint struct {
	System string `json:"system"`
	Path   string `json:"path"`
}

// Request asks for a transfer. Zero fields take defaults (Sync always, Verify sha256, streams
// chosen from the measured round-trip time, DefaultChunkSize, DefaultDeadline).
type Request struct {
	Source      Endpoint `json:"source"`
	Destination Endpoint `json:"destination"`
	// Recursive copies a directory tree; Destination is then the root of the copy.
	Recursive bool   `json:"recursive,omitempty"`
	Sync      Sync   `json:"sync,omitempty"`
	Verify    Verify `json:"verify,omitempty"`
	// Streams is the number of SFTP channel pairs used at once; 0 chooses from the RTT.
	Streams int `json:"streams,omitempty"`
	// ChunkSize is the byte range size large files are cut into.
	ChunkSize int64 `json:"chunk_size,omitempty"`
	// Deadline is an RFC 3339 time or a duration such as "2h" from submission; retries stop then.
	Deadline string `json:"deadline,omitempty"`
	// IdempotencyKey makes a repeated submission return the first transfer.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// FieldError is a request field that failed validation.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// ErrNotFound is wrapped by errors for a transfer the owner does not have.
var ErrNotFound = errors.New("transfer not found")

// ErrConflict is wrapped when an idempotency key is reused with a different request.
var ErrConflict = errors.New("transfer conflict")

// Validate reports the first invalid field of r as a *FieldError, without changing r.
func (r Request) Validate(now time.Time) error {
	_, err := r.normalize(now)
	return err
}

// normalize validates r, fills defaults and returns the absolute deadline. Errors are
// *FieldError.
func (r *Request) normalize(now time.Time) (time.Time, error) {
	bad := func(field, format string, args ...any) (time.Time, error) {
		return time.Time{}, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	for _, ep := range []struct {
		name string
		e    Endpoint
	}{{"source", r.Source}, {"destination", r.Destination}} {
		switch {
		case ep.e.System == "":
			return bad(ep.name+".system", "required")
		case ep.e.Path == "":
			return bad(ep.name+".path", "required")
		case len(ep.e.Path) > maxPathLen:
			return bad(ep.name+".path", "longer than %d bytes", maxPathLen)
		case strings.ContainsRune(ep.e.Path, 0):
			return bad(ep.name+".path", "contains a NUL byte")
		}
	}
	if r.Source.System == r.Destination.System && cleanPath(r.Source.Path) == cleanPath(r.Destination.Path) {
		return bad("destination.path", "is the same as the source")
	}
	switch r.Sync {
	case "":
		r.Sync = SyncAlways
	case SyncAlways, SyncExists, SyncSize, SyncMtime, SyncChecksum:
	default:
		return bad("sync", "must be one of always, exists, size, mtime, checksum")
	}
	switch r.Verify {
	case "":
		r.Verify = VerifySHA256
	case VerifyNone, VerifySize, VerifySHA256:
	default:
		return bad("verify", "must be one of none, size, sha256")
	}
	if r.Streams < 0 || r.Streams > MaxStreams {
		return bad("streams", "must be between 1 and %d (or omitted for automatic)", MaxStreams)
	}
	switch {
	case r.ChunkSize == 0:
		r.ChunkSize = DefaultChunkSize
	case r.ChunkSize < MinChunkSize || r.ChunkSize > MaxChunkSize:
		return bad("chunk_size", "must be between %d and %d bytes", MinChunkSize, MaxChunkSize)
	}
	if len(r.IdempotencyKey) > maxKeyLen {
		return bad("idempotency_key", "longer than %d bytes", maxKeyLen)
	}
	deadline := now.Add(DefaultDeadline)
	if r.Deadline != "" {
		if t, err := time.Parse(time.RFC3339, r.Deadline); err == nil {
			deadline = t
		} else if d, err := time.ParseDuration(r.Deadline); err == nil {
			deadline = now.Add(d)
		} else {
			return bad("deadline", "must be an RFC 3339 time or a duration such as \"2h\"")
		}
		if !deadline.After(now) {
			return bad("deadline", "is in the past")
		}
		if deadline.Sub(now) > MaxDeadline {
			return bad("deadline", "is more than %s away", MaxDeadline)
		}
	}
	return deadline, nil
}

// cleanPath cleans p for comparison, keeping it relative if it was.
func cleanPath(p string) string { return path.Clean(p) }

// Transfer is the state of one transfer as the API shows it.
type Transfer struct {
	ID          string   `json:"id"`
	Owner       string   `json:"-"`
	Status      Status   `json:"status"`
	Source      Endpoint `json:"source"`
	Destination Endpoint `json:"destination"`
	Recursive   bool     `json:"recursive"`
	Sync        Sync     `json:"sync"`
	Verify      Verify   `json:"verify"`
	// Streams is the number of streams in use (chosen or requested); 0 until the first run.
	Streams   int   `json:"streams"`
	ChunkSize int64 `json:"chunk_size"`
	// SameSystem transfers copy on the server without passing data through sshapi.
	SameSystem     bool   `json:"same_system"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`

	BytesTotal   int64 `json:"bytes_total"`
	BytesDone    int64 `json:"bytes_done"`
	FilesTotal   int64 `json:"files_total"`
	FilesDone    int64 `json:"files_done"`
	FilesFailed  int64 `json:"files_failed"`
	FilesSkipped int64 `json:"files_skipped"`
	// BytesRead counts the bytes sshapi read from the source over SFTP, re-sent ranges included;
	// after a fault it exceeds BytesTotal by at most one range per stream.
	BytesRead     int64   `json:"bytes_read"`
	RateBytesPerS float64 `json:"rate_bytes_per_s"`
	ETAS          *int64  `json:"eta_s"`
	Attempts      int     `json:"attempts"`
	// Error is why the transfer failed or, while it runs or retries, the last error.
	Error string `json:"error"`
	// Retries counts the waits for a retry after errors (setup or rounds), over all runs.
	Retries int `json:"retries"`
	// NextAttemptAt is when a retrying transfer tries again.
	NextAttemptAt *time.Time `json:"next_attempt_at"`

	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	Deadline   time.Time  `json:"deadline"`

	streamsReq int  // requested streams, 0 for automatic
	planned    bool // items are stored
	slowRuns   int  // runs that ended too slow and were re-queued
}

// ItemKind is what an item is at the source.
type ItemKind string

// Item kinds.
const (
	KindFile    ItemKind = "file"
	KindDir     ItemKind = "dir"
	KindSymlink ItemKind = "symlink"
)

// ItemStatus is where one item is.
type ItemStatus string

// Item statuses.
const (
	ItemPending ItemStatus = "pending"
	ItemDone    ItemStatus = "done"
	ItemSkipped ItemStatus = "skipped"
	ItemFailed  ItemStatus = "failed"
)

// Item is one file, directory or symlink of a transfer.
type Item struct {
	Seq         int64      `json:"seq"`
	Kind        ItemKind   `json:"kind"`
	Source      string     `json:"source"`
	Destination string     `json:"destination"`
	Size        int64      `json:"size"`
	Status      ItemStatus `json:"status"`
	BytesDone   int64      `json:"bytes_done"`
	RangesDone  int        `json:"ranges_done"`
	Ranges      int        `json:"ranges"`
	Attempts    int        `json:"attempts"`
	SHA256      string     `json:"sha256,omitempty"`
	Error       string     `json:"error,omitempty"`

	mtime      int64  // source modification time, Unix seconds
	mode       uint32 // source permission bits
	linkTarget string
	staged     bool // a temporary file may exist at the destination
}

// tempName is the temporary name a file is written under next to dst.
func tempName(dst, id string) string {
	dir, base := path.Split(dst)
	return dir + "." + base + ".sshapi-" + id + ".part"
}

// rangesOf is the number of chunkSize ranges a file of size bytes has (at least one).
func rangesOf(size, chunkSize int64) int {
	if size <= chunkSize {
		return 1
	}
	return int((size + chunkSize - 1) / chunkSize)
}
