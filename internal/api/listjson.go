package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sshapi/sshapi/internal/files"
)

// A 10,000-entry listing through encoding/json costs about 2 µs per entry in reflection and
// builds the whole body in memory before the first byte leaves. writeListing appends the same
// bytes (encoding/json's output with HTML escaping off, field for field) into one buffer that
// is written out each time it fills. Times outside what RFC 3339 holds go through
// encoding/json itself, so the output never differs.

// listingFlush is the size at which writeListing writes its buffer out.
const listingFlush = 32 << 10

// listingBufSize is the capacity of writeListing's buffers: a flush's worth and room for the
// entry that crosses it.
const listingBufSize = listingFlush + 4<<10

// listingBufs holds writeListing's buffers between requests: a fresh one per listing was a
// zeroed 36 KiB allocation even for a listing of a few entries.
var listingBufs = sync.Pool{New: func() any { b := make([]byte, 0, listingBufSize); return &b }}

// writeListing sends l as JSON with status 200, as writeJSON would. A listing that fits in one
// buffer goes out with its Content-Length; a larger one is written out each time the buffer
// fills (chunked).
func writeListing(w http.ResponseWriter, l *files.Listing) {
	w.Header().Set("Content-Type", "application/json")
	bp := listingBufs.Get().(*[]byte)
	out := &listingOut{w: w}
	b := appendListing((*bp)[:0], l, out)
	if !out.started {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
	}
	_, _ = w.Write(b)
	if cap(b) <= 2*listingBufSize { // an entry with huge names may have grown it: let that go
		*bp = b[:0]
		listingBufs.Put(bp)
	}
}

// listingOut sends the status line before the first stretch of a listing written out early.
type listingOut struct {
	w       http.ResponseWriter
	started bool
}

func (o *listingOut) Write(p []byte) (int, error) {
	if !o.started {
		o.started = true
		o.w.WriteHeader(http.StatusOK)
	}
	return o.w.Write(p)
}

// appendListing appends l's JSON and a newline to b, handing full stretches to out (when not
// nil) on the way; it returns what is left to write.
func appendListing(b []byte, l *files.Listing, out io.Writer) []byte {
	b = append(b, `{"path":`...)
	b = appendJSONString(b, l.Path)
	b = append(b, `,"entries":`...)
	if l.Entries == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		var tc timeCache
		for i := range l.Entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendEntry(b, &l.Entries[i], &tc)
			if out != nil && len(b) >= listingFlush {
				_, _ = out.Write(b)
				b = b[:0]
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, int64(l.Total), 10)
	if l.NextOffset != 0 {
		b = append(b, `,"next_offset":`...)
		b = strconv.AppendInt(b, int64(l.NextOffset), 10)
	}
	if l.NextAfter != "" {
		b = append(b, `,"next_after":`...)
		b = appendJSONString(b, l.NextAfter)
	}
	return append(b, "}\n"...)
}

// appendEntry appends one entry's JSON object.
func appendEntry(b []byte, e *files.Entry, tc *timeCache) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONString(b, e.Name)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, e.Path)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.Type)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, `,"mode":`...)
	b = appendJSONString(b, e.Mode)
	b = append(b, `,"mtime":`...)
	b = tc.append(b, e.ModTime)
	b = append(b, `,"uid":`...)
	b = strconv.AppendUint(b, uint64(e.UID), 10)
	b = append(b, `,"gid":`...)
	b = strconv.AppendUint(b, uint64(e.GID), 10)
	if e.LinkTarget != "" {
		b = append(b, `,"link_target":`...)
		b = appendJSONString(b, e.LinkTarget)
	}
	return append(b, '}')
}

// appendJSONString appends s quoted as encoding/json (HTML escaping off) writes it: '"', '\\'
// and control bytes escaped, each byte that is not part of valid UTF-8 replaced by \ufffd, and
// U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// timeCache appends times as time.Time.MarshalJSON does, remembering the last one: the files
// of a directory often share their modification second.
type timeCache struct {
	t time.Time
	s []byte
}

// append appends t's JSON to b.
func (c *timeCache) append(b []byte, t time.Time) []byte {
	if c.s == nil || !t.Equal(c.t) || t.Location() != c.t.Location() {
		c.t, c.s = t, appendJSONTime(c.s[:0], t)
	}
	return append(b, c.s...)
}

// appendJSONTime appends t as time.Time.MarshalJSON does (RFC 3339 with nanoseconds).
func appendJSONTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		j, err := json.Marshal(t)
		if err != nil {
			return append(b, "null"...) // cannot happen for SFTP's 32-bit times
		}
		return append(b, j...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
