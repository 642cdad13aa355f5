package api

import (
	"net/http/httptest"
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
