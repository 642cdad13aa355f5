package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sshapi/sshapi/internal/files"
)

// A 10,000-entry listing through encoding/json costs about 2 µs per entry in reflection and
// builds the whole body in memory before the first byte leaves. writeListing appends the same
// bytes (encoding/json's output with HTML escaping off, field for field) into a small buffer
// that is flushed as it fills. Strings that are not plain printable ASCII, and times outside
// what RFC 3339 holds, go through encoding/json itself, so the output never differs.

// listingFlush is the size of writeListing's output buffer.
const listingFlush = 32 << 10

// writeListing sends l as JSON with status 200, as writeJSON would.
func writeListing(w http.ResponseWriter, l *files.Listing) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, listingFlush)
	_, _ = bw.Write(appendListing(make([]byte, 0, 4<<10), l, bw))
	_ = bw.Flush()
}

// appendListing appends l's JSON and a newline to b, handing full stretches to out on the way;
// it returns what is left to write.
func appendListing(b []byte, l *files.Listing, out *bufio.Writer) []byte {
	b = append(b, `{"path":`...)
	b = appendJSONString(b, l.Path)
	b = append(b, `,"entries":`...)
	if l.Entries == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range l.Entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendEntry(b, &l.Entries[i])
			if out != nil && len(b) >= listingFlush/2 {
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
func appendEntry(b []byte, e *files.Entry) []byte {
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
	b = appendJSONTime(b, e.ModTime)
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

// appendJSONString appends s quoted: directly when every byte is printable ASCII other than
// '"' and '\\', else as encoding/json (HTML escaping off) writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return appendJSONSlow(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONSlow quotes s with encoding/json.
func appendJSONSlow(b []byte, s string) []byte {
	var buf jsonBuf
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // strings always encode
	return append(b, buf[:len(buf)-1]...)
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

// jsonBuf is a minimal io.Writer collecting bytes.
type jsonBuf []byte

// Write implements io.Writer.
func (j *jsonBuf) Write(p []byte) (int, error) {
	*j = append(*j, p...)
	return len(p), nil
}
