package api

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestQueryParams checks queryInt and queryBool with and without a query string, and that a
// request without one (most listings) is answered from defaults without parsing the query.
func TestQueryParams(t *testing.T) {
	tests := []struct {
		target    string
		wantLimit int
		wantRec   bool
		wantErr   bool
	}{
		{target: "/v1/systems/s/ls/tmp", wantLimit: 100},
		{target: "/v1/systems/s/ls/tmp?limit=7&recursive=true", wantLimit: 7, wantRec: true},
		{target: "/v1/systems/s/ls/tmp?limit=x", wantErr: true},
		{target: "/v1/systems/s/ls/tmp?recursive=maybe", wantLimit: 100, wantErr: true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", tt.target, nil)
		limit, err1 := queryInt(r, "limit", 100, 1, 1000)
		rec, err2 := queryBool(r, "recursive")
		if gotErr := err1 != nil || err2 != nil; gotErr != tt.wantErr {
			t.Fatalf("%s: errors %v, %v; want error %v", tt.target, err1, err2, tt.wantErr)
		}
		if tt.wantErr {
			continue
		}
		if limit != tt.wantLimit || rec != tt.wantRec {
			t.Errorf("%s: limit %d recursive %v, want %d %v", tt.target, limit, rec, tt.wantLimit, tt.wantRec)
		}
	}
	r := httptest.NewRequest("GET", "/v1/systems/s/ls/tmp", nil)
	if n := testing.AllocsPerRun(100, func() {
		_, _ = queryInt(r, "limit", 100, 1, 1000)
		_, _ = queryBool(r, "recursive")
		_ = queryGet(r, "pattern")
	}); n > 0 {
		t.Errorf("reading parameters of a request without a query makes %v allocations, want none", n)
	}
}

// TestQueryGetMatchesURLValues checks that queryGet answers what r.URL.Query().Get does, for
// queries with repeated, escaped, malformed and semicolon-separated parameters and for one
// longer than queryGet scans itself, and that reading the parameters of a listing's query
// without escapes allocates nothing (parsing it into url.Values allocated a map per read).
func TestQueryGetMatchesURLValues(t *testing.T) {
	long := strings.Repeat("x=1&", queryScanMax+1) + "limit=9"
	queries := []string{
		"", "limit=7", "limit=7&limit=8", "limit", "limit=", "&&limit=3&", "limit=%zz&limit=4",
		"%zz=1&limit=5", "limit=1;x=2&limit=6", "lim%69t=7", "limit=a+b%20c", "li+mit=1&limit=2",
		"recursive=true&limit=10&pattern=*.txt", "pattern=%2A.txt", "=1&limit=2", long,
	}
	names := []string{"limit", "recursive", "pattern", "li mit", "x", ""}
	for _, q := range queries {
		r := httptest.NewRequest("GET", "/v1/systems/s/ls/tmp", nil)
		r.URL.RawQuery = q
		for _, name := range names {
			if got, want := queryGet(r, name), r.URL.Query().Get(name); got != want {
				t.Errorf("query %q: queryGet(%q) = %q, url.Values.Get = %q", q, name, got, want)
			}
		}
	}
	r := httptest.NewRequest("GET", "/v1/systems/s/ls/tmp?limit=10&recursive=false&pattern=f", nil)
	if n := testing.AllocsPerRun(100, func() {
		_, _ = queryInt(r, "limit", 100, 1, 1000)
		_, _ = queryBool(r, "recursive")
		_ = queryGet(r, "pattern")
		_ = queryGet(r, "after")
	}); n > 0 {
		t.Errorf("reading parameters of a query without escapes makes %v allocations, want none", n)
	}
}

// BenchmarkQueryGet reads the eight parameters a listing reads from a query with two of them.
//
//	go test -run '^$' -bench QueryGet -benchmem ./internal/api/
func BenchmarkQueryGet(b *testing.B) {
	r := httptest.NewRequest("GET", "/v1/systems/s/ls/tmp?limit=10&recursive=false", nil)
	names := []string{"limit", "recursive", "pattern", "after", "offset", "sort", "hidden", "depth"}
	b.ReportAllocs()
	for b.Loop() {
		for _, n := range names {
			_ = queryGet(r, n)
		}
	}
}
