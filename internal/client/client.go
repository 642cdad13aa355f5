// Package client is the small HTTP client of the sshapi API that the command line's verbs use:
// JSON calls, problem+json errors, streamed uploads and downloads, NDJSON command output and
// Server-Sent Events of transfers.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls one sshapi service with one bearer token.
type Client struct {
	// URL is the service's base URL, without a trailing slash.
	URL string
	// Token is the bearer token sent with every request.
	Token string
	// HTTP sends the requests; it has no overall timeout because downloads and event streams
	// last as long as they need (requests carry their context).
	HTTP *http.Client
}

// New returns a client of the service at baseURL.
func New(baseURL, token string) *Client {
	return &Client{URL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{}}
}

// Problem is an RFC 9457 error answer.
type Problem struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func (p *Problem) Error() string {
	msg := fmt.Sprintf("%d %s", p.Status, p.Title)
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	for _, e := range p.Errors {
		msg += fmt.Sprintf(" [%s: %s]", e.Field, e.Message)
	}
	return msg
}

// IsStatus reports whether err is a Problem with the given status.
func IsStatus(err error, status int) bool {
	var p *Problem
	return errors.As(err, &p) && p.Status == status
}

// FilePath is the URL form of a remote path: absolute without its leading slash, "~" or "~/x";
// a relative path is relative to the home directory, as in a shell.
func FilePath(p string) string {
	switch {
	case p == "" || p == "~" || p == ".":
		return "~"
	case strings.HasPrefix(p, "~/"):
		return p
	case strings.HasPrefix(p, "/"):
		return strings.TrimLeft(p, "/")
	}
	return "~/" + p
}

// BodyPath is the form of a remote path in a transfer's JSON body: absolute, or relative to the
// home directory; "~" and "~/x" are accepted too and made relative.
func BodyPath(p string) string {
	switch {
	case p == "" || p == "~":
		return "."
	case strings.HasPrefix(p, "~/"):
		if rest := strings.TrimLeft(p[2:], "/"); rest != "" {
			return rest
		}
		return "."
	}
	return p
}

// fileURL is the route of a file operation op on system for path p.
func fileURL(system, op, p string) string {
	return "/v1/systems/" + url.PathEscape(system) + "/" + op + "/" + (&url.URL{Path: FilePath(p)}).EscapedPath()
}

// request builds an authorized request; body is JSON-encoded unless it is an io.Reader.
func (c *Client) request(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	u := c.URL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd, ctype = b, "application/octet-stream"
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd, ctype = bytes.NewReader(buf), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("User-Agent", "sshapi-cli")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return req, nil
}

// send sends req and turns an error status into a *Problem; the caller closes the body.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, problemOf(resp)
	}
	return resp, nil
}

func problemOf(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	p := &Problem{}
	if json.Unmarshal(b, p) != nil || p.Title == "" {
		p.Title = http.StatusText(resp.StatusCode)
		p.Detail = strings.TrimSpace(string(b))
	}
	p.Status = resp.StatusCode
	return p
}

// do sends a JSON request and decodes the JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// System is a registered system.
type System struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Host        string `json:"host"`
	Port        int    `json:"port"`
	Endpoint    string `json:"endpoint"`
	Bucket      string `json:"bucket"`
	Prefix      string `json:"prefix"`
	Description string `json:"description"`
}

// Address is where the system is: host:port, or an S3 system's endpoint/bucket/prefix.
func (s System) Address() string {
	if s.Kind == "s3" {
		return strings.TrimSuffix(s.Endpoint, "/") + "/" + strings.TrimSuffix(s.Bucket+"/"+s.Prefix, "/")
	}
	return fmt.Sprintf("%s:%d", s.Host, s.Port)
}

// Systems lists the caller's systems.
func (c *Client) Systems(ctx context.Context) ([]System, error) {
	var out struct {
		Systems []System `json:"systems"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/systems", nil, nil, &out)
	return out.Systems, err
}

// Entry is one file, directory or symlink.
type Entry struct {
	Name       string    `json:"name"`
	Path       string    `json:"path"`
	Type       string    `json:"type"`
	Size       int64     `json:"size"`
	Mode       string    `json:"mode"`
	MTime      time.Time `json:"mtime"`
	LinkTarget string    `json:"link_target"`
}

// List returns every entry of a directory, fetching all pages (by offset on an SSH system, by
// cursor on an S3 system).
func (c *Client) List(ctx context.Context, system, p string, recursive, hidden bool) ([]Entry, error) {
	var all []Entry
	offset, cursor := 0, ""
	for {
		q := url.Values{}
		if offset > 0 {
			q.Set("offset", fmt.Sprint(offset))
		}
		if cursor != "" { // an S3 system pages by cursor
			q.Set("cursor", cursor)
		}
		if recursive {
			q.Set("recursive", "true")
		}
		if hidden {
			q.Set("show_hidden", "true")
		}
		var page struct {
			Entries    []Entry `json:"entries"`
			NextOffset *int    `json:"next_offset"`
			NextCursor string  `json:"next_cursor"`
		}
		if err := c.do(ctx, http.MethodGet, fileURL(system, "ls", p), q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Entries...)
		if page.NextCursor != "" && page.NextCursor != cursor {
			cursor = page.NextCursor
			continue
		}
		if page.NextOffset == nil || *page.NextOffset <= offset {
			return all, nil
		}
		offset = *page.NextOffset
	}
}

// Stat describes one path.
func (c *Client) Stat(ctx context.Context, system, p string) (Entry, error) {
	var e Entry
	err := c.do(ctx, http.MethodGet, fileURL(system, "stat", p), nil, nil, &e)
	return e, err
}

// Remove deletes a file or (with recursive) a directory tree.
func (c *Client) Remove(ctx context.Context, system, p string, recursive bool) error {
	q := url.Values{}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, http.MethodDelete, fileURL(system, "files", p), q, nil, nil)
}

// Op runs a file operation (mkdir, move, copy, chmod, ...) with its JSON body.
func (c *Client) Op(ctx context.Context, system, op string, body map[string]any) error {
	return c.do(ctx, http.MethodPost, "/v1/systems/"+url.PathEscape(system)+"/ops/"+op, nil, body, nil)
}

// Open starts a download of a remote file; the caller reads and closes the body. size is -1
// when the server did not say.
func (c *Client) Open(ctx context.Context, system, p string) (body io.ReadCloser, size int64, err error) {
	req, err := c.request(ctx, http.MethodGet, fileURL(system, "content", p), nil, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.send(req)
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// UploadResult is what the server wrote.
type UploadResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// SHA256 is the digest the server computed; empty when none was asked for.
	SHA256 string `json:"sha256"`
}

// Upload streams r (size bytes) to the remote path; with sha256 set the server refuses a
// mismatch (422) and writes nothing. Without it the server is asked not to hash the body
// (digest=none), and the result has no SHA256.
func (c *Client) Upload(ctx context.Context, system, p string, r io.Reader, size int64, sha256 string, overwrite bool) (UploadResult, error) {
	q := url.Values{}
	if overwrite {
		q.Set("overwrite", "true")
	}
	if sha256 == "" {
		q.Set("digest", "none")
	}
	var res UploadResult
	req, err := c.request(ctx, http.MethodPut, fileURL(system, "content", p), q, r)
	if err != nil {
		return res, err
	}
	req.ContentLength = size
	if sha256 != "" {
		req.Header.Set("X-Checksum-Sha256", sha256)
	}
	resp, err := c.send(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

// Checksum is the SHA-256 of a remote file, computed on the server.
func (c *Client) Checksum(ctx context.Context, system, p string) (string, error) {
	var out struct {
		Checksum string `json:"checksum"`
	}
	err := c.do(ctx, http.MethodGet, fileURL(system, "checksum", p), url.Values{"algorithm": {"sha256"}}, nil, &out)
	return out.Checksum, err
}
