package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/storage"
)

// File routes on an S3 system. The access decision is the same as on an SSH system (owner,
// grants, links, operator switches, audit); when it carries a storage.Backend (Decision.Storage)
// the route's object handler serves the request through that interface and nothing else. The
// dispatch is here, once: byKind for the routes whose paths are in the URL, fileOp's single
// branch for POST ops.
//
// Paths on an S3 system: the root is the bucket plus the system's prefix. A path is cleaned
// like any path ("/a/../b" is "/b"; nothing climbs above the root) and confined to a grant's or
// link's path; "~" and relative paths have no home to start from and mean the root ("~/x" is
// "/x"). Keys whose names are not clean paths ("a//b", "a/./b", a trailing "/" other than a
// directory marker) cannot be named through the API.
//
// A bucket cannot do everything a POSIX file system does: modes, owners, symlinks, commands
// (checksums other than SHA-256 computed here, compress, extract, file type, disk usage) and
// recursive listings. Those requests are answered 409 with a problem naming the
// missing capability ("capability" member): 409 Conflict because the request is valid but
// conflicts with what the target system is (the same request succeeds on an SSH system) and
// repeating it cannot help; not 400, which would say the request itself is malformed, nor 501,
// which would say sshapi lacks the function and invites a retry elsewhere.

// objectHandler serves a file route on an S3 system whose decision is d.
type objectHandler func(w http.ResponseWriter, r *http.Request, d *access.Decision) error

type decidedKey struct{}

// withDecision records the request's decision, so that handlers deciding later (decide) get it
// instead of deciding again.
func withDecision(r *http.Request, d *access.Decision) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), decidedKey{}, d))
}

// byKind decides the request once and serves it with h on an SSH system or oh on an S3 system.
func (s *Server) byKind(h handlerFunc, oh objectHandler) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		d, err := s.decide(r)
		if err != nil {
			return err
		}
		r = withDecision(r, d)
		if d.Storage != nil {
			return oh(w, r, d)
		}
		return h(w, r)
	}
}

// unsupportedOn is the object handler of a route a bucket cannot serve: it names the capability.
func unsupportedOn(c storage.Capability, op string) objectHandler {
	return func(http.ResponseWriter, *http.Request, *access.Decision) error {
		return &storage.UnsupportedError{Kind: "s3", Capability: c, Op: op}
	}
}

// objectPath is the storage path of p (a URL or body path as the file routes take it, see
// urlPath and bodyPath) on d's system: absolute, clean, and inside the grant's or link's path.
func objectPath(d *access.Decision, p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", badField("path", "must not contain NUL bytes")
	}
	clean := path.Clean("/" + p) // "." (the home on SSH) is the root

	if d.Within != "" && !confine.Within(d.Within, clean) {
		return "", fmt.Errorf("%s: %w", clean, files.ErrOutsideRoot)
	}
	return clean, nil
}

// objectError marks an error of the storage backend, so that problemFor maps it by what the
// storage contract says (storageProblem) and not as an SSH or files error.
type objectError struct{ err error }

func (e *objectError) Error() string { return e.err.Error() }
func (e *objectError) Unwrap() error { return e.err }

// objErr wraps a storage error (nil stays nil).
func objErr(err error) error {
	if err == nil {
		return nil
	}
	var oe *objectError
	var he *httpError
	if errors.As(err, &oe) || errors.As(err, &he) {
		return err
	}
	return &objectError{err: err}
}

// storageProblem maps a storage backend's error to its problem: a missing bucket is 404 naming
// the bucket, keys the server refuses are 502 naming the credential (the gateway's stored
// credential is at fault, not the caller's request), an unreachable endpoint 503.
func storageProblem(err error) (Problem, bool) {
	var ue *storage.UnsupportedError
	if errors.As(err, &ue) {
		return Problem{Status: http.StatusConflict, Title: "Not supported by this system's storage", Detail: err.Error(),
			Capability: string(ue.Capability)}, true
	}
	var oe *objectError
	if !errors.As(err, &oe) {
		return Problem{}, false
	}
	msg := err.Error()
	switch {
	case errors.Is(err, fs.ErrNotExist) && strings.Contains(msg, "bucket"):
		return Problem{Status: http.StatusNotFound, Title: "Bucket not found", Detail: msg,
			Errors: []FieldError{{Field: "bucket", Message: "the system's bucket does not exist at its endpoint"}}}, true
	case errors.Is(err, fs.ErrNotExist):
		return Problem{Status: http.StatusNotFound, Detail: msg}, true
	case errors.Is(err, fs.ErrPermission):
		return Problem{Status: http.StatusBadGateway, Title: "S3 refused the credential",
			Detail: msg + "; PUT new keys to /v1/systems/{id}/credential",
			Errors: []FieldError{{Field: "credential", Message: "the S3 server refused the stored access keys"}}}, true
	case errors.Is(err, fs.ErrExist), errors.Is(err, storage.ErrNotDir), errors.Is(err, storage.ErrIsDir), errors.Is(err, storage.ErrNotEmpty):
		return Problem{Status: http.StatusConflict, Detail: msg}, true
	case errors.Is(err, files.ErrChecksumMismatch):
		return Problem{Status: http.StatusUnprocessableEntity, Title: "Checksum mismatch", Detail: msg + " (nothing was written)"}, true
	case errors.Is(err, storage.ErrChanged):
		return Problem{Status: http.StatusConflict, Title: "Source changed", Detail: msg,
			Errors: []FieldError{{Field: "source", Message: "was overwritten by someone else during the operation; look at both paths, then retry"}}}, true
	case errors.Is(err, context.Canceled):
		return Problem{Status: 499, Title: "Client Closed Request", Detail: "the request was canceled"}, true
	case errors.Is(err, context.DeadlineExceeded):
		return Problem{Status: http.StatusGatewayTimeout, Detail: msg}, true
	}
	var ne net.Error
	if errors.As(err, &ne) && !errors.Is(err, netpolicy.ErrDenied) {
		return Problem{Status: http.StatusServiceUnavailable, Title: "S3 endpoint unreachable", Detail: msg, retryAfter: 2}, true
	}
	var api interface{ ErrorCode() string } // the server's own refusal (smithy.APIError)
	if errors.As(err, &api) {
		return Problem{Status: http.StatusBadGateway, Title: "S3 server refused the request", Detail: msg}, true
	}
	return Problem{}, false // the caller's mapping goes on (network policy, internal errors)
}

// objectCall runs fn on d's storage, holding the owner's guard like fsCall does for a grantee or
// link holder (restructure for move and copy; fn's ctx, the request's, ends if the guard is
// lost), and marks its errors as storage errors.
func objectCall(r *http.Request, d *access.Decision, fn func(ctx context.Context, st storage.Backend) error) error {
	release, err := holdFor(r, d)
	if err != nil {
		return err
	}
	defer release()
	return objErr(fn(r.Context(), d.Storage))
}

// objectEntry is an entry as the S3 file routes show it: the fields of an SSH listing's entries
// that a bucket has (no mode, owner or link target), and the object's ETag.
type objectEntry struct {
	Name    string     `json:"name"`
	Path    string     `json:"path"`
	Type    string     `json:"type"`
	Size    int64      `json:"size"`
	ModTime *time.Time `json:"mtime,omitempty"`
	ETag    string     `json:"etag,omitempty"`
}

func toObjectEntry(e *storage.Entry) objectEntry {
	o := objectEntry{Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, ETag: e.ETag}
	if !e.ModTime.IsZero() {
		t := e.ModTime.UTC()
		o.ModTime = &t
	}
	return o
}

// statObject answers GET stat/{path}.
func (s *Server) statObject(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
	p, err := objectPath(d, urlPath(r))
	if err != nil {
		return err
	}
	return objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		e, err := st.Stat(ctx, p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, toObjectEntry(e))
		return nil
	})
}

// objectListing is a page of an S3 directory. Total counts this page's entries only (a bucket
// cannot count a prefix without listing it whole); next_cursor, when present, fetches the next
// page (next_after carries the same cursor for clients that page with after).
type objectListing struct {
	Path       string        `json:"path"`
	Entries    []objectEntry `json:"entries"`
	Total      int           `json:"total"`
	NextCursor string        `json:"next_cursor,omitempty"`
	NextAfter  string        `json:"next_after,omitempty"`
}

// listObjects answers GET ls/{path}: one page of at most limit entries (directories are the
// common prefixes), fetched from the bucket page by page up to limit and never more, so a prefix
// of any size is listed in bounded memory. The page cursor is the backend's (cursor or after).
func (s *Server) listObjects(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
	window := s.cfg.ListMaxWindow
	limit, err := queryInt(r, "limit", min(defaultListLimit, window), 1, window)
	if err != nil {
		return err
	}
	if off, err := queryInt(r, "offset", 0, 0, 1<<31-1); err != nil || off != 0 {
		return badField("offset", "an S3 listing pages with cursor=<next_cursor>, not by offset")
	}
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	if recursive {
		return badField("recursive", "is not supported on an S3 system: list each prefix (directory) in turn")
	}
	if err := objectListSort(r); err != nil {
		return err
	}
	hidden, err := queryBool(r, "show_hidden")
	if err != nil {
		return err
	}
	pattern := r.URL.Query().Get("pattern")
	if pattern != "" {
		if _, err := path.Match(pattern, ""); err != nil {
			return badField("pattern", "is not a valid glob: %v", err)
		}
	}
	cursor := r.URL.Query().Get("cursor")
	if a := r.URL.Query().Get("after"); cursor == "" {
		cursor = a
	}
	p, err := objectPath(d, urlPath(r))
	if err != nil {
		return err
	}
	return objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		out := objectListing{Path: p, Entries: []objectEntry{}}
		for {
			pg, err := st.List(ctx, p, cursor, limit-len(out.Entries))
			if err != nil {
				return err
			}
			for i := range pg.Entries {
				e := &pg.Entries[i]
				if !hidden && strings.HasPrefix(e.Name, ".") {
					continue
				}
				if ok, _ := path.Match(pattern, e.Name); pattern != "" && !ok {
					continue
				}
				out.Entries = append(out.Entries, toObjectEntry(e))
			}
			cursor = pg.Next
			if cursor == "" || len(out.Entries) >= limit {
				break
			}
		}
		out.Total, out.NextCursor, out.NextAfter = len(out.Entries), cursor, cursor
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// deleteObject answers DELETE files/{path}: one object, or with recursive every key below a
// prefix (batch deletes, page by page). The root itself is never removed.
func (s *Server) deleteObject(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	p, err := objectPath(d, urlPath(r))
	if err != nil {
		return err
	}
	if p == "/" {
		return badField("path", "is the system's root: delete what is in it instead")
	}
	return objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		if err := st.Remove(ctx, p, recursive); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// opArgs are the parsed arguments of a POST ops/{op} that an S3 system can run.
type opArgs struct {
	paths                []string // as the body gave them, resolved by bodyPath
	show                 map[string]any
	parents, overwrite   bool
	recursive            bool
	unsupported          storage.Capability // set for ops a bucket cannot do
	unsupportedOperation string
}

// objectOp runs mkdir, move or copy on an S3 system. mkdir stores an empty marker object
// "<dir>/" (S3 has no directories; the marker makes an empty one visible and listings hide it).
// move is a server-side copy then a delete: not atomic (others may see both names meanwhile;
// a failure between the two leaves both), which the answer says ("atomic": false). Directories
// cannot be moved or copied (capability directories).
func (s *Server) objectOp(w http.ResponseWriter, r *http.Request, d *access.Decision, op string, a opArgs) error {
	if a.unsupported != "" {
		return &storage.UnsupportedError{Kind: "s3", Capability: a.unsupported, Op: a.unsupportedOperation}
	}
	ps := make([]string, len(a.paths))
	for i, p := range a.paths {
		var err error
		if ps[i], err = objectPath(d, p); err != nil {
			return err
		}
	}
	start := time.Now()
	out := a.show
	err := objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		// A copy (a move's too) that may not overwrite is a multipart upload of copied parts:
		// recorded like a PUT's, so one left by a killed instance is aborted.
		temps, finish := s.temps.forRequest(d)
		defer finish()
		ctx = temps.withUploads(ctx)
		switch op {
		case "mkdir":
			out["marker"] = strings.TrimSuffix(ps[0], "/") + "/"
			return st.Mkdir(ctx, ps[0], a.parents)
		case "move":
			out["atomic"] = false
			return st.Rename(ctx, ps[0], ps[1], a.overwrite)
		case "copy":
			if a.recursive {
				if e, err := st.Stat(ctx, ps[0]); err == nil && e.Type == storage.TypeDir {
					return &storage.UnsupportedError{Kind: "s3", Capability: storage.Directories, Op: "recursive copy"}
				}
			}
			return st.Copy(ctx, ps[0], ps[1], a.overwrite)
		}
		return fmt.Errorf("object op %q: not handled", op)
	})
	if err != nil {
		return err
	}
	out["ok"], out["op"], out["duration_ms"] = true, op, time.Since(start).Milliseconds()
	writeJSON(w, http.StatusOK, out)
	return nil
}
