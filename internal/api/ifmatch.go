package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sshapi/sshapi/internal/files"
)

// Editing small text files with conflict detection: GET text/{path} answers the content with a
// strong ETag (the SHA-256 of the bytes, so any change shows, unlike the size-and-second
// validator of content/), and PUT text/{path} replaces the file only when If-Match names the
// version the editor started from: 412 when the file changed since, 428 without If-Match. The
// new content is written to a temporary name and renamed into place (files.Upload), so a
// reader never sees half of it. The check and the rename are two SFTP steps: a write by
// another program between them (milliseconds) is not detected.

// maxEditBytes is the largest file the text routes read or write (its JSON body, escaped, fits
// the default max_body_bytes of 1 MiB).
const maxEditBytes = 512 << 10

// textBody is PUT text/{path}'s body.
type textBody struct {
	Content string `json:"content"`
}

// textETag is the strong validator of content.
func textETag(content []byte) string {
	sum := sha256.Sum256(content)
	return `"sha256-` + hex.EncodeToString(sum[:]) + `"`
}

// readText reads file p whole if it is UTF-8 text of at most maxEditBytes.
func readText(r *http.Request, fsys *files.FS, p string) ([]byte, *files.Entry, error) {
	f, e, err := fsys.OpenRead(r.Context(), p)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if e.Size > maxEditBytes {
		return nil, nil, errStatus(http.StatusConflict, "%s has %d bytes: the editor opens files of at most %d bytes; download it instead", e.Path, e.Size, maxEditBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxEditBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", e.Path, err)
	}
	if len(b) > maxEditBytes {
		return nil, nil, errStatus(http.StatusConflict, "%s grew past %d bytes while it was read", e.Path, maxEditBytes)
	}
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return nil, nil, errStatus(http.StatusConflict, "%s is not UTF-8 text: download it instead", e.Path)
	}
	return b, e, nil
}

// getText answers {path, content, size, etag} with the ETag header.
func (s *Server) getText(w http.ResponseWriter, r *http.Request) error {
	return s.fsCall(r, false, true, func(fsys *files.FS) error {
		b, e, err := readText(r, fsys, urlPath(r))
		if err != nil {
			return err
		}
		tag := textETag(b)
		w.Header().Set("ETag", tag)
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, map[string]any{"path": e.Path, "content": string(b), "size": len(b), "etag": tag})
		return nil
	})
}

// putText replaces the file when If-Match holds. The path is resolved first, so a path outside
// the system's root is 403 whatever the headers.
func (s *Server) putText(w http.ResponseWriter, r *http.Request) error {
	if r.PathValue("path") == "" || strings.HasSuffix(r.PathValue("path"), "/") {
		return badField("path", "must name a file, not a directory")
	}
	return s.fsCall(r, false, false, func(fsys *files.FS) error {
		p := urlPath(r)
		if _, err := fsys.Stat(r.Context(), p, true); err != nil {
			return err
		}
		match := strings.TrimSpace(r.Header.Get("If-Match"))
		if match == "" {
			return &httpError{status: http.StatusPreconditionRequired,
				detail: "If-Match: required: send the ETag the file had when you opened it, so a change made since is not overwritten",
				fields: []FieldError{{Field: "If-Match", Message: "is required"}}}
		}
		var body textBody
		if err := decodeJSON(r, &body); err != nil {
			return err
		}
		if len(body.Content) > maxEditBytes {
			return badField("content", "has %d bytes; at most %d can be saved here", len(body.Content), maxEditBytes)
		}
		if !utf8.ValidString(body.Content) {
			return badField("content", "must be UTF-8 text")
		}
		cur, _, err := readText(r, fsys, p)
		if errors.Is(err, fs.ErrNotExist) {
			return &httpError{status: http.StatusPreconditionFailed, detail: "the file no longer exists: it was moved or deleted since you opened it",
				fields: []FieldError{{Field: "If-Match", Message: "names a version that no longer exists"}}}
		}
		if err != nil {
			return err
		}
		if tag := textETag(cur); match != "*" && !etagListHas(match, tag) {
			w.Header().Set("ETag", tag)
			return &httpError{status: http.StatusPreconditionFailed,
				detail: "the file changed since you opened it: reload it (your text is not saved) or save it under another name",
				fields: []FieldError{{Field: "If-Match", Message: "does not match the file's current ETag " + tag}}}
		}
		res, err := fsys.Upload(r.Context(), p, strings.NewReader(body.Content), files.UploadOptions{Overwrite: true})
		if err != nil {
			return err
		}
		tag := textETag([]byte(body.Content))
		w.Header().Set("ETag", tag)
		writeJSON(w, http.StatusOK, map[string]any{"path": res.Path, "size": len(body.Content), "etag": tag})
		return nil
	})
}

// etagListHas reports whether the If-Match list holds tag (strong comparison: a weak
// validator never matches).
func etagListHas(list, tag string) bool {
	for _, t := range strings.Split(list, ",") {
		if strings.TrimSpace(t) == tag {
			return true
		}
	}
	return false
}
