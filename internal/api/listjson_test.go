package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/files"
)

// TestListingJSONMatchesEncodingJSON: the hand-written listing encoder writes exactly what
// encoding/json (HTML escaping off) writes, for plain and hostile names, link targets, every
// optional field present or not, and odd times.
func TestListingJSONMatchesEncodingJSON(t *testing.T) {
	names := []string{"plain.txt", "with space", `q"uote`, `back\slash`, "new\nline", "tab\t\b\f\r", "\x00\x01\x1f\x7f",
		"ünïcødé-日本語", "bad\xff\xfeutf8", "\u2028\u2029", "<html>&amp;", "'single'", "",
		"surrogate\xed\xa0\x80", "overlong\xc0\xaf", "cut\xe6\x97", "\x80lone", "del\x7f", "\U0001F600 and \u00e9\u0301", "x\u2029\xe2\x80"}
	times := []time.Time{time.Unix(0, 0).UTC(), time.Unix(1732345678, 0).UTC(), time.Unix(1732345678, 123456789).UTC(),
		time.Unix(1<<32-1, 0).UTC(), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(1732345678, 0).In(time.FixedZone("x", 3600)),
		time.Unix(1732345678, 0).In(time.FixedZone("UTC", 0)), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), time.Unix(1732345678, 0).UTC()}
	var entries []files.Entry
	for i, n := range names {
		e := files.Entry{Name: n, Path: "/d/" + n, Type: files.TypeFile, Size: int64(i) << 40, Mode: "0644",
			ModTime: times[i%len(times)], UID: uint32(i) * 1000, GID: 1<<32 - 1}
		if i%2 == 0 {
			e.Type, e.LinkTarget = files.TypeSymlink, "../"+n
		}
		entries = append(entries, e)
	}
	tests := []struct {
		name string
		l    files.Listing
	}{
		{"entries and both cursors", files.Listing{Path: "/d", Entries: entries, Total: 99, NextOffset: 13, NextAfter: "new\nline"}},
		{"last page", files.Listing{Path: "/weird\"dir\xff", Entries: entries[:3], Total: 3}},
		{"empty", files.Listing{Path: "/", Entries: []files.Entry{}}},
		{"nil entries", files.Listing{Path: "/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(&tc.l); err != nil {
				t.Fatal(err)
			}
			got := appendListing(nil, &tc.l, nil)
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("differs:\n got %s\nwant %s", got, want.Bytes())
			}
		})
	}
	// Many entries: the streamed writes add up to the same body.
	var big files.Listing
	big.Path = "/big"
	for i := range 3000 {
		big.Entries = append(big.Entries, entries[i%len(entries)])
	}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(&big)
	rec := httptest.NewRecorder()
	writeListing(rec, &big)
	if !bytes.Equal(rec.Body.Bytes(), want.Bytes()) || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") || rec.Code != 200 {
		t.Fatalf("streamed listing differs (%d bytes, want %d), status %d", rec.Body.Len(), want.Len(), rec.Code)
	}
}

// BenchmarkListingJSON10k: encoding a 10,000-entry page (what a listing of a 10,000-file
// directory returns) to an HTTP response.
func BenchmarkListingJSON10k(b *testing.B) {
	l := files.Listing{Path: "/home/user/data", Total: 10_000}
	for i := range 10_000 {
		name := fmt.Sprintf("f%05d", i)
		l.Entries = append(l.Entries, files.Entry{Name: name, Path: l.Path + "/" + name, Type: files.TypeFile, Mode: "0644",
			ModTime: time.Unix(1732345678+int64(i/1000), 0).UTC(), UID: 1000, GID: 1000})
	}
	w := &countingResponse{header: http.Header{}}
	for b.Loop() {
		writeListing(w, &l)
	}
	b.SetBytes(int64(w.n / b.N))
}

// countingResponse is an http.ResponseWriter that counts and discards the body.
type countingResponse struct {
	header http.Header
	n      int
}

func (c *countingResponse) Header() http.Header { return c.header }
func (c *countingResponse) WriteHeader(int)     {}
func (c *countingResponse) Write(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// discardResponse is a ResponseWriter that keeps its headers and drops the body.
type discardResponse struct{ h http.Header }

func (d *discardResponse) Header() http.Header         { return d.h }
func (d *discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardResponse) WriteHeader(int)             {}

// TestSmallListingResponse: a listing that fits in one buffer goes out with its Content-Length
// (a larger one streams, see TestListingJSONMatchesEncodingJSON), and writing it does not
// allocate a fresh 36 KiB buffer each time (pooled).
func TestSmallListingResponse(t *testing.T) {
	l := files.Listing{Path: "/home/u/ls", Total: 10}
	for i := range 10 {
		n := fmt.Sprintf("f%02d", i)
		l.Entries = append(l.Entries, files.Entry{Name: n, Path: l.Path + "/" + n, Type: files.TypeFile, Mode: "0644", ModTime: time.Unix(1732345678, 0).UTC()})
	}
	rec := httptest.NewRecorder()
	writeListing(rec, &l)
	if cl := rec.Header().Get("Content-Length"); cl != fmt.Sprint(rec.Body.Len()) || rec.Code != 200 {
		t.Fatalf("Content-Length %q for a %d-byte body, status %d", cl, rec.Body.Len(), rec.Code)
	}
	if want := string(appendListing(nil, &l, nil)); rec.Body.String() != want {
		t.Fatalf("body differs:\n got %s\nwant %s", rec.Body.String(), want)
	}
	const runs = 200
	w := &discardResponse{h: http.Header{}}
	writeListing(w, &l)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		writeListing(w, &l)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 16<<10 {
		t.Errorf("%d bytes allocated per 10-entry listing written, want at most 16 KiB", per)
	}
}
