package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/store"
)

// Resumable uploads: the tus 1.0 protocol (https://tus.io/protocols/resumable-upload), core
// plus the creation, creation-with-upload, expiration and termination extensions, one endpoint
// per system (/v1/systems/{id}/uploads), as tus-js-client and Uppy's @uppy/tus speak it.
//
// It is implemented here rather than with tusd's handler because every request must make the
// same access decision as PUT content (grants, disable switches, the guard) and answer errors as
// problem+json, and the lock must be the database's: what tusd would add (its composer, hooks
// and locker) would be bypassed or replaced, leaving only the header parsing, which is small.
//
// The data goes to a hidden part file next to the destination (package files' resumable API);
// the committed offset and the SHA-256 state after it live in the database (store.UploadStore),
// never in the part file's size, which a failed write can leave larger. A PATCH holds the
// upload's lease in the database, so one request at a time, on any instance, writes it. On the
// last byte the digest is checked (if the client gave one) and the part file renamed into place.

const (
	tusVersion    = "1.0.0"
	tusExtensions = "creation,creation-with-upload,expiration,termination"
	tusOffsetType = "application/offset+octet-stream"
	// tusChunk is how much of a PATCH body is written and committed at a time: a cut
	// connection loses at most this much of what was received.
	tusChunk = 1 << 20
)

type tusWriteKey struct{}

// tusTraceKey carries a PATCH's timeline on its context.
type tusTraceKey struct{}

// tusTrace notes step on ctx's timeline, if it has one.
func tusTrace(ctx context.Context, step string) {
	if tl, ok := ctx.Value(tusTraceKey{}).(*timeline); ok {
		tl.note(step)
	}
}

// withWriteLevel makes decide ask for write access whatever the method (a tus HEAD decides as
// the upload's PUT would).
func withWriteLevel(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), tusWriteKey{}, true))
}

// tusHeaders sets the headers every tus response carries and checks the request's version.
func tusHeaders(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Tus-Resumable", tusVersion)
	if r.Method == http.MethodOptions {
		return nil
	}
	if v := r.Header.Get("Tus-Resumable"); v != tusVersion {
		w.Header().Set("Tus-Version", tusVersion)
		return errStatus(http.StatusPreconditionFailed, "Tus-Resumable: %s is required (got %q)", tusVersion, v)
	}
	return nil
}

// tusOptions answers the tus discovery request.
func (s *Server) tusOptions(w http.ResponseWriter, r *http.Request) error {
	_ = tusHeaders(w, r)
	w.Header().Set("Tus-Version", tusVersion)
	w.Header().Set("Tus-Extension", tusExtensions)
	w.Header().Set("Tus-Max-Size", strconv.FormatInt(s.cfg.TusMaxSize, 10))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// parseTusMeta parses Upload-Metadata, "key base64,key base64,key" (a key may come without a
// value). The keys read are path (required: the destination, absolute or relative to the home,
// as in a JSON body), sha256 (hex), overwrite and parents ("true"); others (Uppy sends name,
// type, filename...) are ignored.
func parseTusMeta(h string) (map[string]string, error) {
	m := map[string]string{}
	if strings.TrimSpace(h) == "" {
		return m, nil
	}
	for _, pair := range strings.Split(h, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(pair), " ")
		if k == "" {
			return nil, badField("Upload-Metadata", "has an empty key")
		}
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return nil, badField("Upload-Metadata", "value of %q is not base64", k)
		}
		m[k] = string(b)
	}
	return m, nil
}

func metaBool(m map[string]string, key string) (bool, error) {
	v, ok := m[key]
	if !ok {
		return false, nil
	}
	switch strings.ToLower(v) {
	case "", "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, badField("Upload-Metadata", "%s must be true or false", key)
}

// tusCreate creates an upload (POST with Upload-Length and Upload-Metadata), and with a body of
// type application/offset+octet-stream also writes its first bytes.
func (s *Server) tusCreate(w http.ResponseWriter, r *http.Request) error {
	if err := tusHeaders(w, r); err != nil {
		return err
	}
	if r.Header.Get("Upload-Defer-Length") != "" {
		return badField("Upload-Defer-Length", "is not supported: give Upload-Length")
	}
	length, err := strconv.ParseInt(r.Header.Get("Upload-Length"), 10, 64)
	if err != nil || length < 0 {
		return badField("Upload-Length", "is required: a non-negative integer")
	}
	if length > s.cfg.TusMaxSize {
		return errStatus(http.StatusRequestEntityTooLarge, "Upload-Length %d exceeds the largest upload, %d bytes (Tus-Max-Size)", length, s.cfg.TusMaxSize)
	}
	meta, err := parseTusMeta(r.Header.Get("Upload-Metadata"))
	if err != nil {
		return err
	}
	p, err := bodyPath("path", meta["path"])
	if err != nil {
		return badField("Upload-Metadata", "path is required: the destination file")
	}
	u := &store.Upload{Owner: principal(r).User, SystemRef: r.PathValue("id"), Path: p, Length: length,
		SHA256: strings.ToLower(meta["sha256"])}
	if u.SHA256 != "" {
		if b, err := hex.DecodeString(u.SHA256); err != nil || len(b) != sha256.Size {
			return badField("Upload-Metadata", "sha256 must be 64 hex digits")
		}
	}
	if u.Overwrite, err = metaBool(meta, "overwrite"); err != nil {
		return err
	}
	if u.Parents, err = metaBool(meta, "parents"); err != nil {
		return err
	}
	withBody := r.Header.Get("Content-Type") == tusOffsetType
	if withBody && r.ContentLength > length {
		return errStatus(http.StatusRequestEntityTooLarge, "the body is longer than Upload-Length")
	}
	if r, err = s.tusDecide(r, p); err != nil {
		return err
	}
	return s.fsCallWith(r, withBody, false, func(fsys *files.FS, t sshpool.Target, c *sftp.Client) error {
		var err error
		var recorded func()
		if u.Dest, u.PartName, recorded, err = fsys.CreateResumable(r.Context(), p, u.Overwrite, u.Parents); err != nil {
			return err
		}
		// The part file is in the temporary-name ledger until the upload's record below holds
		// it (or it is removed again): a process killed in between leaves it to the sweep.
		now := time.Now()
		u.ID = strings.ToLower(rand.Text())
		u.SystemOwner, u.SystemID = decided(r)
		u.ExpiresAt = now.Add(s.cfg.TusExpiry)
		u.HashState, _ = sha256.New().(encoding.BinaryMarshaler).MarshalBinary()
		err = s.deps.Store.CreateUpload(r.Context(), &store.CreateUploadParams{Upload: u, Now: now,
			MaxOpen: s.cfg.TusMaxOpenPerOwner, MaxBytes: s.cfg.TusMaxBytesPerOwner})
		if err != nil {
			if fsys.RemoveResumable(context.WithoutCancel(r.Context()), u.Dest, u.PartName) == nil {
				recorded()
			}
			if errors.Is(err, store.ErrLimit) {
				return &httpError{status: http.StatusTooManyRequests, detail: err.Error(), retryAfter: 60}
			}
			return err
		}
		recorded() // the upload's record holds the part file now
		w.Header().Set("Location", "/v1/systems/"+url.PathEscape(u.SystemRef)+"/uploads/"+u.ID)
		w.Header().Set("Upload-Expires", u.ExpiresAt.UTC().Format(http.TimeFormat))
		if !withBody && length > 0 {
			w.WriteHeader(http.StatusCreated)
			return nil
		}
		var body io.Reader = http.NoBody
		if withBody {
			b, done := s.idleBody(w, r)
			defer done()
			body = b
		}
		return s.tusAppend(w, r, fsys, t, c, u, 0, body, http.StatusCreated)
	})
}

// decided returns the system the request's access decision resolved (owner, id).
func decided(r *http.Request) (owner, id string) {
	n := noteOf(r)
	if n == nil {
		return "", ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.systemOwner, n.system
}

// tusUpload returns the caller's upload named in the URL, or a 404 (410 once expired).
func (s *Server) tusUpload(r *http.Request) (*store.Upload, error) {
	u, err := s.deps.Store.GetUpload(r.Context(), principal(r).User, r.PathValue("upload_id"))
	if errors.Is(err, store.ErrNotFound) || (err == nil && u.SystemRef != r.PathValue("id")) {
		return nil, errStatus(http.StatusNotFound, "no such upload: create one with POST /v1/systems/%s/uploads", r.PathValue("id"))
	}
	if err != nil {
		return nil, err
	}
	if !time.Now().Before(u.ExpiresAt) {
		return nil, errStatus(http.StatusGone, "the upload expired at %s", u.ExpiresAt.Format(time.RFC3339))
	}
	return u, nil
}

// tusHead answers the committed offset, after the same access decision as the upload's writes.
func (s *Server) tusHead(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "no-store")
	if err := tusHeaders(w, r); err != nil {
		return err
	}
	u, err := s.tusUpload(r)
	if err != nil {
		return err
	}
	if _, err := s.tusDecide(r, u.Path); err != nil {
		return err
	}
	w.Header().Set("Upload-Offset", strconv.FormatInt(u.Offset, 10))
	w.Header().Set("Upload-Length", strconv.FormatInt(u.Length, 10))
	w.Header().Set("Upload-Expires", u.ExpiresAt.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	return nil
}

// tusDecide decides r at write level on the upload's destination path p (not the URL's) and
// keeps the decision on the returned request, so the file call after it does not decide again.
// A bucket is refused naming the capability: resumable uploads write SFTP part files, and on an
// S3 system PUT content (a multipart upload, aborted on failure) is the way.
func (s *Server) tusDecide(r *http.Request, p string) (*http.Request, error) {
	r = withWriteLevel(withOpPaths(r, []string{p}))
	d, err := s.decide(r)
	if err != nil {
		return r, err
	}
	if d.Storage != nil {
		return r, &storage.UnsupportedError{Kind: d.Storage.Capabilities().Kind, Capability: storage.ResumableUploads, Op: "resumable upload"}
	}
	return withDecision(r, d), nil
}

// tusPatch appends the body at Upload-Offset, which must be the committed offset (409).
func (s *Server) tusPatch(w http.ResponseWriter, r *http.Request) error {
	if err := tusHeaders(w, r); err != nil {
		return err
	}
	if ct := r.Header.Get("Content-Type"); ct != tusOffsetType {
		return errStatus(http.StatusUnsupportedMediaType, "Content-Type must be %s (got %q)", tusOffsetType, ct)
	}
	off, err := strconv.ParseInt(r.Header.Get("Upload-Offset"), 10, 64)
	if err != nil || off < 0 {
		return badField("Upload-Offset", "is required: a non-negative integer")
	}
	tl := newTimeline()
	defer func() { s.log.Debug("tus patch timeline", "steps", tl.String()) }()
	u, err := s.tusUpload(r)
	if err != nil {
		return err
	}
	body, done := s.idleBody(w, r)
	defer done()
	if r, err = s.tusDecide(r, u.Path); err != nil {
		return err
	}
	tl.note("decided")
	r = r.WithContext(context.WithValue(r.Context(), tusTraceKey{}, tl))
	return body.err(s.fsCallWith(r, true, false, func(fsys *files.FS, t sshpool.Target, c *sftp.Client) error {
		tl.note("channel")
		return s.tusAppend(w, r, fsys, t, c, u, off, body, http.StatusNoContent)
	}))
}

// tusAppend takes the upload's lease, checks off against the committed offset and writes body
// (and, on the last byte, finishes the upload), answering status.
//
// The answer goes out as soon as the bytes are written, acknowledged and committed (or, on the
// last byte, renamed into place) and the lease is given back: closing the part file's handles
// and giving the channels back, a round trip or more on a long path, follow it (as for PUT). No
// byte is written after the lease is given back, so the next PATCH, which may already be
// writing, is still the only writer.
func (s *Server) tusAppend(w http.ResponseWriter, r *http.Request, fsys *files.FS, t sshpool.Target, c *sftp.Client, u *store.Upload, off int64,
	body io.Reader, status int) error {
	ctx := r.Context()
	now := time.Now()
	lp := &store.LeaseUploadParams{Owner: u.Owner, ID: u.ID, Token: rand.Text(), Now: now, Until: now.Add(s.cfg.TusLease)}
	u, err := s.deps.Store.LeaseUpload(ctx, lp)
	if errors.Is(err, store.ErrLocked) {
		return errStatus(http.StatusLocked, "another request is writing this upload; retry once it ends")
	}
	if err != nil {
		return err
	}
	tusTrace(ctx, "leased")
	dbctx := context.WithoutCancel(ctx) // a cut request still commits what it wrote
	held := s.keepUploadLease(ctx, lp)  // renewed while the body comes, however slowly
	// Deferred first, so run last on an error: the handles are closed (below) before the lease
	// is given back.
	release := sync.OnceFunc(func() {
		held.Stop()
		_ = s.deps.Store.ReleaseUpload(dbctx, u.Owner, u.ID, lp.Token)
	})
	defer release()
	if off != u.Offset {
		return errStatus(http.StatusConflict, "Upload-Offset %d is not the upload's offset, %d: ask with HEAD", off, u.Offset)
	}
	if r.ContentLength > 0 && off+r.ContentLength > u.Length {
		return errStatus(http.StatusRequestEntityTooLarge, "the body would end at %d, beyond Upload-Length %d", off+r.ContentLength, u.Length)
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(u.HashState); err != nil {
		return fmt.Errorf("upload %s: restore sha256 state: %w", u.ID, err)
	}
	w.Header().Set("Upload-Expires", u.ExpiresAt.UTC().Format(http.TimeFormat))
	var wr *tusWritten
	if off < u.Length {
		wr, err = s.tusWrite(ctx, dbctx, fsys, t, c, u, lp, held, h, body, r.ContentLength)
		if wr != nil {
			defer wr.close() // after the answer, or, on an error, before the lease goes
		}
		if err != nil {
			return err
		}
		if wr != nil {
			wr.freeBufs() // their budget: the next PATCH may stripe with it at once
		}
	}
	w.Header().Set("Upload-Offset", strconv.FormatInt(u.Offset, 10))
	if u.Offset == u.Length {
		var f *files.ResumableFile
		if wr != nil {
			f = wr.f
		}
		if err := held.Held(); err != nil {
			return err
		}
		if err := s.tusFinish(r.WithContext(held.Context()), fsys, u, h, f); err != nil {
			return err
		}
		tusTrace(ctx, "finished")
	}
	release()
	w.WriteHeader(status)
	_ = http.NewResponseController(w).Flush()
	tusTrace(ctx, "answered")
	return nil
}

// tusWritten is what a PATCH's write holds once its bytes are written: the part file's handles
// and the stripe channels and buffers under them. close closes and gives back all of it;
// freeBufs only the buffers. Each may be called more than once.
type tusWritten struct {
	f        *files.ResumableFile
	freeBufs func()
	close    func()
}

// tusWrite copies body to the part file from u.Offset in chunks of tusChunk, several in flight
// (and, on a long path, over several SFTP channels, as PUT: the stripe channels the pool's
// measured round trip calls for are asked for at once, and the round-trip probe that decides
// runs beside the part file's open), committing to the database, in order, the end of each
// prefix completely written with its hash state: u.Offset is always a committed offset. Bytes
// received before the body failed are written and committed. The last bytes are committed by
// the rename (tusFinish), not here: were they committed first, a HEAD after a failed rename
// would tell the client that the upload is complete.
//
// What it returns (nil only with an error before anything was opened) is for the caller to
// close once it has answered, or once it has finished the upload with its part file.
func (s *Server) tusWrite(ctx, dbctx context.Context, fsys *files.FS, t sshpool.Target, c *sftp.Client, u *store.Upload,
	lp *store.LeaseUploadParams, held *uploadLease, h hash.Hash, body io.Reader, contentLength int64) (*tusWritten, error) {
	remaining := u.Length - u.Offset
	if contentLength >= 0 {
		remaining = min(remaining, contentLength)
	}
	if remaining <= 0 { // an empty PATCH (a client asking whether the upload is free again)
		return nil, nil
	}
	tl, _ := ctx.Value(tusTraceKey{}).(*timeline)
	if tl == nil {
		tl = newTimeline()
	}
	// Whether to stripe is decided on what the upload has left, not on this PATCH's part of
	// it: a client sending a large file in small PATCHes gets the same channels for each (the
	// pool keeps them open between PATCHes), each joining one open round trip in. How many is
	// capped by what this PATCH can keep busy: a channel more would only be opened, and waited
	// for and closed after the answer, while the client's next PATCH waits.
	left := u.Length - u.Offset
	var early *earlyStripes
	if near, far := s.earlyStripeCount(t.Key, left); near+far > 0 {
		if extra := min(near+far, s.spanChannels(remaining)-1); extra > 0 {
			near = (extra + 1) / 2 // as leaseExtra splits them
			early = s.startEarlyStripes(ctx, t, near, extra-near)
		}
	}
	plan, freeBufs, release := s.planUpload(ctx, t, c, left, remaining, early, tl)
	open := fsys.OpenResumable
	if u.Offset+remaining == u.Length {
		open = fsys.OpenResumableToFinish
	}

	f, err := open(ctx, u.Dest, u.PartName)
	tl.note("opened")
	if err != nil {
		release()
		early.stop()
		return nil, err
	}
	wr := &tusWritten{f: f, freeBufs: freeBufs, close: sync.OnceFunc(func() {
		// A no-op after Finish. Every write was answered before its offset was committed; a
		// close that fails now (a file system that reports write errors late) can only be told.
		if err := f.Close(); err != nil {
			s.log.Warn("closing a resumable upload's part file after its PATCH", "upload", u.ID, "err", err)
		}
		release()
		early.stop()
		tl.note("closed")
	})}
	opts := files.AppendOptions{Trace: tl.note, Hold: held.Held, Commit: func(end int64, state []byte) error {
		if end == u.Length {
			return nil
		}
		lp.Offset, lp.HashState, lp.Until = end, state, time.Now().Add(s.cfg.TusLease)
		if err := s.deps.Store.CommitUpload(dbctx, lp); errors.Is(err, store.ErrLocked) {
			return held.Lost(err)
		} else if err != nil {
			return err
		}
		held.Extended(lp.Until)
		u.Offset = end
		return nil
	}}
	opts.Stripes, opts.Buffers = plan()
	if len(opts.Buffers) == 0 {
		n := min(int64(tusChunk), remaining)
		opts.Buffers = [][]byte{make([]byte, n), make([]byte, n)}
	}
	end, err := f.Append(ctx, body, u.Offset, u.Length, h, opts)
	if err != nil {
		return wr, err
	}
	if end == u.Length {
		u.Offset = u.Length
	}
	return wr, nil
}

// tusFinish verifies the digest (a mismatch removes the part file and the upload: 422) and
// renames the part file into place: through f, the part file the last bytes went through
// (whose handles close in the same round trip as the part file gets its mode), or, where
// nothing was written (an empty upload, or the last bytes sent again after a failed rename), by
// name. If the connection failed on the way, or the request's context ended before the rename
// (the client went away after its last byte), the upload stays at its last committed offset
// (before the last chunk), for the client to send that chunk again.
func (s *Server) tusFinish(r *http.Request, fsys *files.FS, u *store.Upload, h hash.Hash, f *files.ResumableFile) error {
	ctx := r.Context()
	dbctx := context.WithoutCancel(ctx)
	sum := hex.EncodeToString(h.Sum(nil))
	if u.SHA256 != "" && u.SHA256 != sum {
		if f != nil {
			_ = f.Close()
		}
		_ = fsys.RemoveResumable(dbctx, u.Dest, u.PartName)
		_ = s.deps.Store.DeleteUpload(dbctx, u.Owner, u.ID)
		return &files.Error{Op: "upload", Path: u.Dest, Kind: files.ErrChecksumMismatch, Err: fmt.Errorf("expected sha256 %s, got %s", u.SHA256, sum)}
	}
	var err error
	if f != nil {
		err = f.Finish(ctx, u.Length, u.Overwrite)
	} else {
		_, err = fsys.FinishResumable(ctx, u.Dest, u.PartName, u.Length, u.Overwrite)
	}
	if err != nil {
		if !files.PartKept(err) {
			_ = s.deps.Store.DeleteUpload(dbctx, u.Owner, u.ID) // the part file was removed
		}
		return err
	}
	if n := noteOf(r); n != nil {
		n.mu.Lock()
		n.detail = fmt.Sprintf("resumable upload %s complete: %d bytes, sha256 %s", u.ID, u.Length, sum)
		n.mu.Unlock()
	}
	return s.deps.Store.DeleteUpload(dbctx, u.Owner, u.ID)
}

// tusDelete terminates an upload: its part file and row go.
func (s *Server) tusDelete(w http.ResponseWriter, r *http.Request) error {
	if err := tusHeaders(w, r); err != nil {
		return err
	}
	u, err := s.tusUpload(r)
	if err != nil {
		return err
	}
	if r, err = s.tusDecide(r, u.Path); err != nil {
		return err
	}
	return s.fsCall(r, false, false, func(fsys *files.FS) error {
		now := time.Now()
		token := rand.Text()
		if _, err := s.deps.Store.LeaseUpload(r.Context(), &store.LeaseUploadParams{Owner: u.Owner, ID: u.ID, Token: token, Now: now,
			Until: now.Add(s.cfg.TusLease)}); errors.Is(err, store.ErrLocked) {
			return errStatus(http.StatusLocked, "another request is writing this upload; retry once it ends")
		} else if err != nil {
			return err
		}
		if err := fsys.RemoveResumable(r.Context(), u.Dest, u.PartName); err != nil {
			_ = s.deps.Store.ReleaseUpload(context.WithoutCancel(r.Context()), u.Owner, u.ID, token)
			return err
		}
		if err := s.deps.Store.DeleteUpload(r.Context(), u.Owner, u.ID); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
