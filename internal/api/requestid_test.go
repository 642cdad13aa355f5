package api

import (
	"net/http/httptest"
	"regexp"
	"testing"
)

// TestRequestID checks that a sane X-Request-Id is kept, that a missing or insane one is
// replaced by 20 characters of the lowercase base32 alphabet, different every time, and that
// making one costs a single allocation (the string; lowercasing rand.Text's cost two more).
func TestRequestID(t *testing.T) {
	made := regexp.MustCompile(`^[a-z2-7]{20}$`)
	tests := []struct {
		header string
		keep   bool
	}{
		{header: "", keep: false},
		{header: "abc-123_X.y", keep: true},
		{header: "has space", keep: false},
		{header: string(make([]byte, 65)), keep: false},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/v1/systems", nil)
		if tt.header != "" {
			r.Header.Set("X-Request-Id", tt.header)
		}
		for range 100 {
			id := requestID(r)
			switch {
			case tt.keep && id != tt.header:
				t.Fatalf("X-Request-Id %q: got %q, want it kept", tt.header, id)
			case !tt.keep && !made.MatchString(id):
				t.Fatalf("X-Request-Id %q: made %q, want 20 lowercase base32 characters", tt.header, id)
			case !tt.keep && seen[id]:
				t.Fatalf("made %q twice", id)
			}
			seen[id] = true
		}
	}
	r := httptest.NewRequest("GET", "/v1/systems", nil)
	if n := testing.AllocsPerRun(100, func() { _ = requestID(r) }); n > 1 {
		t.Errorf("making a request id costs %v allocations, want 1", n)
	}
}
