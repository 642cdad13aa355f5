package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/slot"
	"github.com/sshapi/sshapi/internal/storage"
)

// getObject answers GET content/{path} on an S3 system: a file with Range (206), its ETag and
// conditional requests (http.ServeContent over ranged GETs), or a directory (prefix) as a tar,
// tar.gz or zip archive streamed in constant memory.
func (s *Server) getObject(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
	archive := r.URL.Query().Get("archive")
	switch archive {
	case "", "tar", "tar.gz", "zip":
	default:
		return badField("archive", "must be tar, tar.gz or zip")
	}
	if r.URL.Query().Has("name") {
		return badField("name", "an S3 system downloads one prefix (folder) at a time")
	}
	p, err := objectPath(d, urlPath(r))
	if err != nil {
		return err
	}
	return objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		e, err := st.Stat(ctx, p)
		if err != nil {
			return err
		}
		if e.Type == storage.TypeDir {
			if archive == "" {
				return errStatus(http.StatusConflict, "%s is a directory: add ?archive=tar, tar.gz or zip to download it", e.Path)
			}
			dw := s.newDeadlineWriter(w, time.Time{})
			defer dw.done()
			types := map[string]string{"tar": "application/x-tar", "tar.gz": "application/gzip", "zip": "application/zip"}
			name := path.Base(e.Path)
			if e.Path == "/" {
				name = d.SystemID
			}
			w.Header().Set("Content-Type", types[archive])
			w.Header().Set("Content-Disposition", contentDisposition(name+"."+archive))
			w.WriteHeader(http.StatusOK)
			// Errors after the headers cannot change the status; the archive is then truncated.
			return writeObjectArchive(ctx, st, e.Path, name, archive, dw)
		}
		dw := s.newDeadlineWriter(w, time.Time{})
		defer dw.done()
		if e.ETag != "" {
			w.Header().Set("ETag", e.ETag)
		}
		w.Header().Set("Content-Disposition", contentDisposition(path.Base(e.Path)))
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Type", "application/octet-stream")
		rs := &objectReader{ctx: ctx, st: st, p: e.Path, etag: e.ETag, size: e.Size}
		defer rs.Close()
		http.ServeContent(deadlineResponse{ResponseWriter: w, dw: dw}, r, "", e.ModTime, rs)
		if err := dw.Err(); err != nil {
			return fmt.Errorf("download abandoned by the client: %w", err)
		}
		return rs.err
	})
}

// objectReader is an io.ReadSeeker over one object for http.ServeContent: a seek costs nothing,
// a read after a seek opens a ranged GET from there (to the end; closed when the next seek or
// Close comes), so a Range request fetches only from its start. Every GET is conditional on
// etag, the version whose ETag, size and time the response's headers carry: the object
// replaced meanwhile ends the body short (storage.ErrChanged) instead of sending another
// version's bytes under them, or mixing two versions in the parts of a multi-range answer.
type objectReader struct {
	ctx  context.Context
	st   storage.Backend
	p    string
	etag string
	size int64
	off  int64
	rc   io.ReadCloser
	err  error // the first storage error, for the handler (ServeContent cannot return one)
}

func (o *objectReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += o.off
	case io.SeekEnd:
		off += o.size
	}
	if off < 0 {
		return 0, errors.New("seek before the start")
	}
	if off != o.off && o.rc != nil {
		_ = o.rc.Close()
		o.rc = nil
	}
	o.off = off
	return off, nil
}

func (o *objectReader) Read(b []byte) (int, error) {
	if o.off >= o.size {
		return 0, io.EOF
	}
	if o.rc == nil {
		rc, err := o.st.Open(o.ctx, o.p, o.off, -1, o.etag)
		if err != nil {
			o.err = err
			return 0, err
		}
		o.rc = rc
	}
	n, err := o.rc.Read(b)
	o.off += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && o.err == nil {
		o.err = err
	}
	return n, err
}

func (o *objectReader) Close() error {
	if o.rc == nil {
		return nil
	}
	err := o.rc.Close()
	o.rc = nil
	return err
}

// putObject answers PUT content/{path} on an S3 system: the body is streamed as a multipart
// upload (see uploadObject); the object appears only when complete and verified.
func (s *Server) putObject(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
	opts, err := uploadOptions(r)
	if err != nil {
		return err
	}
	if opts.Mode != 0 {
		return &storage.UnsupportedError{Kind: "s3", Capability: storage.Modes, Op: "upload with a mode"}
	}
	if r.PathValue("path") == "" || strings.HasSuffix(r.PathValue("path"), "/") {
		return badField("path", "must name a file, not a directory")
	}
	p, err := objectPath(d, urlPath(r))
	if err != nil {
		return err
	}
	if p == "/" {
		return badField("path", "must name a file, not the root")
	}
	body, done := s.idleBody(w, r)
	defer done()
	return body.err(objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		temps, finish := s.temps.forRequest(d) // a multipart upload left by a killed instance is aborted
		defer finish()
		res, err := s.uploadObject(temps.withUploads(ctx), st, p, body, r.ContentLength, opts)
		if err != nil {
			return uploadErr(err)
		}
		writeJSON(w, http.StatusCreated, res)
		return nil
	}))
}

// postObject answers POST content/{dir} (multipart/form-data) on an S3 system: each file part
// is uploaded into the directory like PUT.
func (s *Server) postObject(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
	opts, err := uploadOptions(r)
	if err != nil {
		return err
	}
	if opts.SHA256 != "" {
		return badField("sha256", "is only supported for single-file PUT uploads")
	}
	if opts.Mode != 0 {
		return &storage.UnsupportedError{Kind: "s3", Capability: storage.Modes, Op: "upload with a mode"}
	}
	dir, err := objectPath(d, urlPath(r))
	if err != nil {
		return err
	}
	body, done := s.idleBody(w, r)
	defer done()
	r.Body = io.NopCloser(body)
	mr, err := r.MultipartReader()
	if err != nil {
		return errStatus(http.StatusUnsupportedMediaType, "POST to a directory needs a multipart/form-data body: %v", err)
	}
	var results []*files.UploadResult
	err = objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		temps, finish := s.temps.forRequest(d) // a multipart upload left by a killed instance is aborted
		defer finish()
		ctx = temps.withUploads(ctx)
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return errStatus(http.StatusBadRequest, "malformed multipart body: %v", err)
			}
			name := part.FileName()
			if name == "" {
				part.Close()
				continue
			}
			if name != path.Base(name) || name == "." || name == ".." || strings.ContainsRune(name, '/') {
				return badField("filename", "%q must be a plain file name", name)
			}
			res, err := s.uploadObject(ctx, st, path.Join(dir, name), part, -1, opts)
			part.Close()
			if err != nil {
				return uploadErr(err)
			}
			results = append(results, res)
		}
	})
	if err := body.err(err); err != nil {
		return err
	}
	if len(results) == 0 {
		return badField("file", "the multipart body has no file part")
	}
	writeJSON(w, http.StatusCreated, map[string]any{"uploaded": results})
	return nil
}

// uploadObject streams body (size bytes, -1 when unknown) into a new object at p: parts of
// S3Config.PartSize (grown so that a known size fits in the backend's part count) are read in
// order, hashed into the whole object's SHA-256, and sent with up to S3Config.PartsInFlight in
// flight, so memory stays at about 2 × part size × parts in flight whatever the size, taken from
// the server's stream budget (http.download_buffer_budget_bytes, with the owner's share). If the
// body fails, the request is canceled, a part is refused or the SHA-256 given in opts does not
// match, the upload is aborted: nothing is left, neither object nor parts.
func (s *Server) uploadObject(ctx context.Context, st storage.Backend, p string, body io.Reader, size int64, opts files.UploadOptions) (res *files.UploadResult, err error) {
	cfg := s.access.Config().S3
	caps := st.Capabilities()
	partSize := cfg.PartSize
	if caps.MaxParts > 0 && size > 0 {
		need := (size + int64(caps.MaxParts) - 1) / int64(caps.MaxParts)
		partSize = max(partSize, (need+(1<<20)-1)/(1<<20)*(1<<20))
	}
	if caps.MaxPartSize > 0 && partSize > caps.MaxPartSize {
		return nil, errStatus(http.StatusRequestEntityTooLarge, "upload of %d bytes exceeds what one object can hold", size)
	}
	up, err := st.Create(ctx, p, storage.UploadOptions{Size: size, Overwrite: opts.Overwrite, Parents: true})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if aerr := up.Abort(actx); aerr != nil {
				s.log.Warn("aborting a failed S3 upload failed; the bucket's lifecycle rules must clean it up", "path", p, "err", aerr)
			}
		}
	}()
	var whole hash.Hash // nil: the upload was asked for no digest
	if !opts.NoDigest {
		whole = sha256.New()
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		total    int64
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	// Part buffers come from the server's stream budget (with the owner's share), twice over
	// (the backend holds a copy of a part while it is sent): the first one is waited for (then
	// 503), further ones only taken while the budget has room, up to PartsInFlight.
	alloc := partSize
	if size >= 0 {
		alloc = min(partSize, size+1) // a small body needs no part-sized buffer
	}
	need := min(2*alloc, s.downloads.Share())
	wctx, wcancel := s.budgetCtx(ctx)
	lease, err := s.downloads.Acquire(wctx, shareOwner(ctx), need)
	wcancel()
	if err != nil {
		return nil, errBusy("upload buffers", err)
	}
	leases := []*slot.Lease{lease}
	defer func() {
		for _, l := range leases {
			l.Release()
		}
	}()
	free := make(chan []byte, cfg.PartsInFlight) // part buffers not in use
	allocated := 0
	getBuf := func() []byte {
		select {
		case b := <-free:
			return b
		default:
		}
		if allocated == 0 { // the first lease is held already
			allocated++
			return make([]byte, alloc)
		}
		if allocated < cfg.PartsInFlight {
			if l, err := s.downloads.TryAcquire(shareOwner(ctx), need); err == nil {
				leases = append(leases, l)
				allocated++
				return make([]byte, alloc)
			}
		}
		select {
		case b := <-free:
			return b
		case <-pctx.Done():
			return nil
		}
	}
	for n := 1; ; n++ {
		buf := getBuf()
		if pctx.Err() != nil || buf == nil {
			break
		}
		k, rerr := io.ReadFull(body, buf)
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			fail(rerr)
			break
		}
		if k == 0 && n > 1 {
			break
		}
		if caps.MaxParts > 0 && n > caps.MaxParts {
			fail(errStatus(http.StatusRequestEntityTooLarge, "upload exceeds %d parts of %d bytes", caps.MaxParts, partSize))
			break
		}
		if whole != nil {
			whole.Write(buf[:k])
		}
		off := total
		total += int64(k)
		wg.Add(1)
		go func(n int, part []byte, off int64) {
			defer wg.Done()
			sum := sha256.Sum256(part)
			if err := up.WritePart(pctx, n, off, bytesReader(part), int64(len(part)), sum[:]); err != nil {
				fail(err)
			}
			free <- part[:cap(part)]
		}(n, buf[:k], off)
		if rerr != nil { // the body ended inside this part
			break
		}
	}
	wg.Wait()
	mu.Lock()
	err = firstErr
	mu.Unlock()
	if err != nil {
		return nil, err
	}
	var got string
	if whole != nil {
		got = hex.EncodeToString(whole.Sum(nil))
	}
	if opts.SHA256 != "" && !strings.EqualFold(got, opts.SHA256) {
		return nil, fmt.Errorf("upload %s: SHA-256 of the body is %s, not %s: %w", p, got, strings.ToLower(opts.SHA256), files.ErrChecksumMismatch)
	}
	if _, err = up.Commit(ctx); err != nil {
		return nil, err
	}
	return &files.UploadResult{Path: p, Size: total, SHA256: got}, nil
}

// checksumObject answers GET checksum/{path} on an S3 system: the object is read and hashed here
// (SHA-256 only: the server's own checksums of multipart objects are not the object's).
func (s *Server) checksumObject(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
	algo := r.URL.Query().Get("algorithm")
	if algo == "" {
		algo = "sha256"
	}
	if algo != "sha256" {
		return badField("algorithm", "must be sha256 on an S3 system (the object is hashed by sshapi as it streams)")
	}
	p, err := objectPath(d, urlPath(r))
	if err != nil {
		return err
	}
	return objectCall(r, d, func(ctx context.Context, st storage.Backend) error {
		e, err := st.Stat(ctx, p)
		if err != nil {
			return err
		}
		if e.Type != storage.TypeFile {
			return fmt.Errorf("checksum %s: %w", p, storage.ErrIsDir)
		}
		rc, err := st.Open(ctx, p, 0, -1, e.ETag)
		if err != nil {
			return err
		}
		defer rc.Close()
		var h hash.Hash = sha256.New()
		if _, err := io.Copy(h, rc); err != nil {
			return fmt.Errorf("checksum %s: %w", p, err)
		}
		writeJSON(w, http.StatusOK, map[string]string{"path": p, "algorithm": algo, "checksum": hex.EncodeToString(h.Sum(nil))})
		return nil
	})
}

// bytesReader is a reader over a part held in memory.
func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
