package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultChunkSize is how many bytes UploadResumable sends per PATCH unless told otherwise. The
// server commits every MiB it writes, so a cut loses at most a MiB whatever the PATCH size; each
// PATCH costs a few round trips between the service and the system (an SFTP open, the last
// write's answer, the handles' closing before the next PATCH is read: about 0.3 s on a 50 ms
// path, where a 64 MiB PATCH took under 0.7 s), hence PATCHes as large as a proxy in front of
// the service allows (measured with `sshapi bench tus`).
const DefaultChunkSize = 1 << 30

// MinChunkSize is the smallest PATCH UploadResumable falls back to when a 413 (a proxy's body
// limit in front of the service) refuses larger ones: it halves the PATCH size down to this.
const MinChunkSize = 1 << 20

// ResumableOptions controls UploadResumable.
type ResumableOptions struct {
	// SHA256 is the content's hex digest; the server refuses a mismatch on the last byte (422)
	// and leaves nothing.
	SHA256 string
	// Overwrite replaces an existing file.
	Overwrite bool
	// URL continues an upload created earlier (the Location its creation answered, as Created
	// was told or an *InterruptedError carries); empty creates a new upload.
	URL string
	// Created, if set, is told the new upload's URL as soon as the server created it, so that a
	// caller can keep it and continue after its process died.
	Created func(url string)
	// ChunkSize is the most bytes one PATCH carries (default DefaultChunkSize).
	ChunkSize int64
	// Progress, if set, is told the server's committed offset after each PATCH with bytes that
	// succeeded (and the size when the upload turns out to be complete already).
	Progress func(offset int64)
	// Sent, if set, is told how far into the file the upload is as the bytes are handed to the
	// connection, and the committed offset it goes on from after a failure (a progress bar).
	Sent func(offset int64)
	// Retries is how many failed requests in a row are retried from the server's committed
	// offset (default 5), with a wait of Backoff (default 500ms) times the failures so far; 423
	// answers are waited out for up to LockWait and not counted.
	Retries int
	Backoff time.Duration
}

// InterruptedError is a resumable upload that gave up after Retries failed requests in a row;
// ResumableOptions.URL set to URL continues it (until the service's http.tus_expiry).
type InterruptedError struct {
	// URL is the upload's URL (path) on the service.
	URL string
	// Offset is the last committed offset the client knew of.
	Offset int64
	// Err is the last failure.
	Err error
}

// Error says where the upload stopped.
func (e *InterruptedError) Error() string {
	return fmt.Sprintf("resumable upload interrupted at byte %d (%s): %v", e.Offset, e.URL, e.Err)
}

// Unwrap returns the last failure.
func (e *InterruptedError) Unwrap() error { return e.Err }

// LockWait is how long UploadResumable keeps waiting while the server answers 423 (the request
// that failed, or another one, still holds the upload: it drains what it had received before it
// lets go, which on a busy server takes seconds). These waits do not count against Retries.
const LockWait = 2 * time.Minute

// ErrUploadGone is returned when the upload named by ResumableOptions.URL no longer exists (it
// expired, was terminated, failed, or finished) and the remote file does not hold the bytes.
var ErrUploadGone = errors.New("the resumable upload no longer exists")

// UploadResumable uploads size bytes of r to the remote path through the service's tus endpoint
// (/v1/systems/{id}/uploads): PATCHes of o.ChunkSize bytes (halved, down to MinChunkSize, each
// time one is refused with 413 Content Too Large); after a lost connection, a 5xx, a
// 409 or a 423, a HEAD for the committed offset and an empty PATCH there (which succeeds only
// once the failed request has ended on the server, so the next PATCH is not refused halfway
// through its body), then the rest from there. o.URL continues an earlier upload. A lost
// answer to the last PATCH is recognised by the remote file's SHA-256 (o.SHA256 must be set
// for that).
func (c *Client) UploadResumable(ctx context.Context, system, p string, r io.ReaderAt, size int64, o ResumableOptions) error {
	if o.Retries <= 0 {
		o.Retries = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = DefaultChunkSize
	}
	progress := func(off int64) {
		if o.Progress != nil {
			o.Progress(off)
		}
	}
	sent := func(off int64) {
		if o.Sent != nil {
			o.Sent(off)
		}
	}
	// uploaded says whether the remote file already holds the bytes (the upload finished and
	// its answer was lost, here or in an earlier run).
	uploaded := func() bool {
		if o.SHA256 == "" {
			return false
		}
		sum, err := c.Checksum(ctx, system, p)
		return err == nil && sum == o.SHA256
	}
	loc, off := o.URL, int64(0)
	if loc == "" {
		var err error
		if loc, err = c.createUpload(ctx, system, p, size, o); err != nil {
			return err
		}
		if o.Created != nil {
			o.Created(loc)
		}
	} else {
		got, length, err := c.uploadOffset(ctx, loc)
		if IsStatus(err, http.StatusNotFound) || IsStatus(err, http.StatusGone) {
			if uploaded() {
				sent(size)
				progress(size)
				return nil
			}
			return fmt.Errorf("%w: %s: %w", ErrUploadGone, loc, err)
		}
		if err != nil {
			return err
		}
		if length != size {
			return fmt.Errorf("the upload at %s is %d bytes long, the file %d: not the same file", loc, length, size)
		}
		off = got
	}
	sent(off)
	current := true
	locked, lockDeadline := 0, time.Time{} // 423s in a row, and until when they are waited out
	for failures := 0; off < size; {
		var err error
		if current {
			n := min(o.ChunkSize, size-off)
			body := &countingReader{r: io.NewSectionReader(r, off, n), off: off, progress: sent}
			if off, err = c.patchUpload(ctx, loc, off, body, n); err == nil {
				failures, locked = 0, 0
				progress(off)
				continue
			}
		} else {
			// The committed offset, then an empty PATCH there to wait out the failed request.
			var got int64
			if got, _, err = c.uploadOffset(ctx, loc); IsStatus(err, http.StatusNotFound) && uploaded() {
				sent(size)
				progress(size)
				return nil
			}
			if err == nil {
				if off, err = c.patchUpload(ctx, loc, got, http.NoBody, 0); err == nil {
					current, locked = true, 0
					sent(off)
					continue
				}
			}
		}
		if current && IsStatus(err, http.StatusRequestEntityTooLarge) && min(o.ChunkSize, size-off) > MinChunkSize {
			// Something in front of the service (a proxy's body limit) refused a PATCH this
			// large: halve the PATCHes and go on from the committed offset, not counting a
			// failure; at MinChunkSize a refusal is final.
			o.ChunkSize = max(MinChunkSize, min(o.ChunkSize, size-off)/2)
			current = false
			continue
		}
		if !resumable(err) || ctx.Err() != nil {
			return err
		}
		current = false
		wait := time.Duration(failures+1) * o.Backoff
		if IsStatus(err, http.StatusLocked) && (locked == 0 || time.Now().Before(lockDeadline)) {
			// The server is up and busy finishing the failed request (it drains what it had
			// received before it lets go of the upload): wait it out, not counting a failure.
			if locked == 0 {
				lockDeadline = time.Now().Add(LockWait)
			}
			locked++
			wait = time.Duration(min(locked, 4)) * o.Backoff
		} else if failures++; failures > o.Retries {
			return &InterruptedError{URL: loc, Offset: off, Err: err}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	return nil
}

// resumable reports whether err is worth asking the committed offset and going on: a lost
// connection, a server error, 409 (the offset moved) or 423 (another request holds the upload).
// Refusals, a checksum mismatch (422) and a gone upload are final.
func resumable(err error) bool {
	var p *Problem
	if errors.As(err, &p) {
		return p.Status >= 500 || p.Status == http.StatusConflict || p.Status == http.StatusLocked
	}
	return err != nil
}

// createUpload creates the upload and returns its URL (path).
func (c *Client) createUpload(ctx context.Context, system, p string, size int64, o ResumableOptions) (string, error) {
	meta := []string{"path " + b64(p)}
	if o.SHA256 != "" {
		meta = append(meta, "sha256 "+b64(o.SHA256))
	}
	if o.Overwrite {
		meta = append(meta, "overwrite "+b64("true"))
	}
	resp, err := c.tus(ctx, http.MethodPost, "/v1/systems/"+url.PathEscape(system)+"/uploads", nil, 0,
		"Upload-Length", strconv.FormatInt(size, 10), "Upload-Metadata", strings.Join(meta, ","))
	if err != nil {
		return "", fmt.Errorf("create upload: %w", err)
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return "", errors.New("create upload: the server answered no Location")
	}
	return loc, nil
}

// uploadOffset asks the upload's committed offset and length (HEAD).
func (c *Client) uploadOffset(ctx context.Context, loc string) (offset, length int64, err error) {
	resp, err := c.tus(ctx, http.MethodHead, loc, nil, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("HEAD %s: %w", loc, err)
	}
	if offset, err = headerInt(resp, "Upload-Offset"); err != nil {
		return 0, 0, err
	}
	length, err = headerInt(resp, "Upload-Length")
	return offset, length, err
}

// patchUpload sends n bytes of body at off and returns the committed offset answered.
func (c *Client) patchUpload(ctx context.Context, loc string, off int64, body io.Reader, n int64) (int64, error) {
	resp, err := c.tus(ctx, http.MethodPatch, loc, body, n,
		"Content-Type", "application/offset+octet-stream", "Upload-Offset", strconv.FormatInt(off, 10))
	if err != nil {
		return off, fmt.Errorf("PATCH %s at %d: %w", loc, off, err)
	}
	got, err := headerInt(resp, "Upload-Offset")
	if err != nil {
		return off, err
	}
	return got, nil
}

func headerInt(resp *http.Response, name string) (int64, error) {
	v, err := strconv.ParseInt(resp.Header.Get(name), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("tus: bad %s %q in the answer", name, resp.Header.Get(name))
	}
	return v, nil
}

// countingReader tells progress the file offset of what r has given so far.
type countingReader struct {
	r        io.Reader
	off      int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.off += int64(n)
		c.progress(c.off)
	}
	return n, err
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// tus sends one tus request (n body bytes; headers as name, value pairs) and returns the
// response, its body read and closed; an error status is a *Problem.
func (c *Client) tus(ctx context.Context, method, path string, body io.Reader, n int64, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = n
	if body == http.NoBody {
		req.ContentLength = 0
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("User-Agent", "sshapi-cli")
	req.Header.Set("Tus-Resumable", "1.0.0")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}
