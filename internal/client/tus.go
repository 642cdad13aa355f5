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

// ResumableOptions controls UploadResumable.
type ResumableOptions struct {
	// SHA256 is the content's hex digest; the server refuses a mismatch on the last byte (422)
	// and leaves nothing.
	SHA256 string
	// Overwrite replaces an existing file.
	Overwrite bool
	// Progress, if set, is told the committed offset after each request.
	Progress func(offset int64)
	// Retries is how many failed requests in a row are retried from the server's committed
	// offset (default 5).
	Retries int
}

// UploadResumable uploads size bytes of r to the remote path through the service's tus
// endpoint: one PATCH with the rest of the file, and after a lost connection (or a 5xx, 409 or
// 423) a HEAD for the committed offset and a PATCH from there.
func (c *Client) UploadResumable(ctx context.Context, system, p string, r io.ReaderAt, size int64, o ResumableOptions) error {
	if o.Retries <= 0 {
		o.Retries = 5
	}
	meta := []string{"path " + b64(p)}
	if o.SHA256 != "" {
		meta = append(meta, "sha256 "+b64(o.SHA256))
	}
	if o.Overwrite {
		meta = append(meta, "overwrite "+b64("true"))
	}
	resp, err := c.tus(ctx, http.MethodPost, "/v1/systems/"+url.PathEscape(system)+"/uploads", nil,
		"Upload-Length", strconv.FormatInt(size, 10), "Upload-Metadata", strings.Join(meta, ","))
	if err != nil {
		return err
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return errors.New("tus: the server answered no Location")
	}
	var off int64
	for failures := 0; off < size; {
		resp, err = c.tus(ctx, http.MethodPatch, loc, io.NewSectionReader(r, off, size-off),
			"Content-Type", "application/offset+octet-stream", "Upload-Offset", strconv.FormatInt(off, 10))
		if err == nil {
			if off, err = strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64); err != nil {
				return fmt.Errorf("tus: bad Upload-Offset: %w", err)
			}
			failures = 0
			if o.Progress != nil {
				o.Progress(off)
			}
			continue
		}
		var pr *Problem
		if errors.As(err, &pr) && pr.Status < 500 && pr.Status != http.StatusConflict && pr.Status != http.StatusLocked {
			return err // refused, failed or gone: retrying cannot help
		}
		if ctx.Err() != nil || failures >= o.Retries {
			return err
		}
		failures++
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(failures) * 500 * time.Millisecond):
		}
		if resp, err = c.tus(ctx, http.MethodHead, loc, nil); err != nil {
			return fmt.Errorf("tus: after a failed PATCH: %w", err)
		}
		if off, err = strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64); err != nil {
			return fmt.Errorf("tus: bad Upload-Offset: %w", err)
		}
	}
	return nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// tus sends one tus request (headers as name, value pairs) and returns the response, its body
// read and closed; an error status is a *Problem.
func (c *Client) tus(ctx context.Context, method, path string, body io.Reader, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, body)
	if err != nil {
		return nil, err
	}
	if s, ok := body.(*io.SectionReader); ok {
		req.ContentLength = s.Size()
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
