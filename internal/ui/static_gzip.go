package ui

import (
	"bytes"
	"compress/gzip"
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
// compressed files do. Others get the files as they are.
type compressedStatic struct {
	files fs.FS
	plain http.Handler

	mu   sync.Mutex
	gzip map[string][]byte // file name → its gzip, built on first request
}

func newCompressedStatic(files fs.FS) *compressedStatic {
	return &compressedStatic{files: files, plain: http.FileServerFS(files), gzip: map[string][]byte{}}
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
