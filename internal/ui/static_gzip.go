package ui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

// compressedStatic serves the embedded page files (the page, its scripts and stylesheet),
// gzipped once at first use and kept, to browsers that accept gzip: the page weighs what the
// compressed files do. Others get the files as they are. Each file carries an ETag (its
// content's SHA-256) and "Cache-Control: no-cache": a browser keeps the files and asks whether
// they changed, which a 304 answers without the body, so a page loaded again (or a new version
// of the binary) costs one small round trip per file and never serves a stale script.
type compressedStatic struct {
	files fs.FS
	plain http.Handler

	mu   sync.Mutex
	gzip map[string][]byte // file name → its gzip, built on first request
	etag map[string]string // file name → its ETag, built on first request
}

func newCompressedStatic(files fs.FS) *compressedStatic {
	return &compressedStatic{files: files, plain: http.FileServerFS(files), gzip: map[string][]byte{}, etag: map[string]string{}}
}

// etagOf returns name's ETag, or "" when it cannot be read.
func (c *compressedStatic) etagOf(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.etag[name]; ok {
		return t
	}
	raw, err := fs.ReadFile(c.files, name)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(raw)
	t := `"` + hex.EncodeToString(sum[:16]) + `"`
	c.etag[name] = t
	return t
}

// compressed returns name's gzip, or nil when it cannot be read.
func (c *compressedStatic) compressed(name string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.gzip[name]; ok {
		return b
	}
	raw, err := fs.ReadFile(c.files, name)
	if err != nil {
		return nil
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // the level is valid
	_, _ = zw.Write(raw)
	_ = zw.Close()
	c.gzip[name] = buf.Bytes()
	return buf.Bytes()
}

// ServeHTTP serves r.URL.Path (relative to the static directory).
func (c *compressedStatic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept-Encoding")
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if tag := c.etagOf(name); tag != "" && name != "" {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", tag)
		if inm := r.Header.Get("If-None-Match"); inm != "" && etagListHas(inm, tag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	if !acceptsGzip(r) || name == "" {
		c.plain.ServeHTTP(w, r)
		return
	}
	b := c.compressed(name)
	if b == nil {
		c.plain.ServeHTTP(w, r)
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// acceptsGzip reports whether the request's Accept-Encoding lists gzip (without q=0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// etagListHas reports whether an If-None-Match value ("*" or a list of ETags, weak or strong)
// names tag (compared weakly, as If-None-Match is).
func etagListHas(list, tag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == tag {
			return true
		}
	}
	return false
}
