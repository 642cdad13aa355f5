package api

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/storage"
)

// excerptObject answers GET head/{path} and tail/{path} on an S3 system with one ranged GET of
// at most files.MaxExcerpt+1 bytes: the first or last bytes, or the first or last lines found in
// them (a line longer than that is cut, and the answer says truncated), the same answer as on an
// SSH system.
func (s *Server) excerptObject(tail bool) objectHandler {
	return func(w http.ResponseWriter, r *http.Request, d *access.Decision) error {
		n, lines, err := excerptQuery(r)
		if err != nil {
			return err
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
				return fmt.Errorf("excerpt %s: %w", p, storage.ErrIsDir)
			}
			want := int64(files.MaxExcerpt + 1)
			if n > 0 {
				want = int64(min(n, files.MaxExcerpt))
			}
			want = min(want, e.Size)
			off := int64(0)
			if tail {
				off = e.Size - want
			}
			var data []byte
			if want > 0 {
				rc, err := st.Open(ctx, p, off, want, e.ETag) // the version whose size placed off
				if err != nil {
					return err
				}
				data, err = io.ReadAll(io.LimitReader(rc, want))
				rc.Close()
				if err != nil {
					return fmt.Errorf("excerpt %s: %w", p, err)
				}
			}
			x := &files.Excerpt{Size: e.Size}
			switch {
			case n > 0:
				x.Data, x.Truncated = data, n > files.MaxExcerpt && e.Size > files.MaxExcerpt
			case tail:
				x.Data, x.Truncated = lastLines(data, lines)
			default:
				x.Data, x.Truncated = firstLines(data, lines)
			}
			out := map[string]any{"size": x.Size, "truncated": x.Truncated}
			out["content"], out["encoding"] = encodeBytes(x.Data)
			writeJSON(w, http.StatusOK, out)
			return nil
		})
	}
}

// excerptQuery reads bytes= or lines= (files.DefaultLines lines when neither is given).
func excerptQuery(r *http.Request) (n, lines int, err error) {
	q := r.URL.Query()
	if q.Get("bytes") != "" && q.Get("lines") != "" {
		return 0, 0, badField("bytes", "give bytes or lines, not both")
	}
	if n, err = queryInt(r, "bytes", 0, 1, files.MaxExcerpt); err != nil {
		return 0, 0, err
	}
	if lines, err = queryInt(r, "lines", 0, 1, 1_000_000); err != nil {
		return 0, 0, err
	}
	if n == 0 && lines == 0 {
		lines = files.DefaultLines
	}
	return n, lines, nil
}

// firstLines is the first lines lines of data (the start of a file, up to MaxExcerpt+1 bytes).
func firstLines(data []byte, lines int) ([]byte, bool) {
	for i, c := range data {
		if c == '\n' {
			if lines--; lines == 0 {
				return data[:i+1], false
			}
		}
	}
	if len(data) > files.MaxExcerpt {
		return data[:files.MaxExcerpt], true
	}
	return data, false
}

// lastLines is the last lines lines of data (the end of a file, up to MaxExcerpt+1 bytes), a
// final newline not counting as a line's start.
func lastLines(data []byte, lines int) ([]byte, bool) {
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			if lines--; lines == 0 {
				return data[i+1:], false
			}
		}
	}
	if len(data) > files.MaxExcerpt {
		return data[len(data)-files.MaxExcerpt:], true
	}
	return data, false
}
