package api

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// answerRecorder records a response and, when it is pushed to the client (Flush), runs pushed
// with what had been written by then.
type answerRecorder struct {
	*httptest.ResponseRecorder
	pushed  func(status int, hdr http.Header, body string)
	flushes int
}

// Flush implements http.Flusher.
func (r *answerRecorder) Flush() {
	r.flushes++
	r.pushed(r.Code, r.Header().Clone(), r.Body.String())
	r.ResponseRecorder.Flush()
}

// TestUploadAnswersBeforeCleanup: a PUT upload's answer is pushed to the client whole (status,
// Content-Length, body) as soon as the file is in place, before the handler gives its SSH
// channels back; a listing the client sends on seeing it already shows the file (kept listings
// were dropped first).
func TestUploadAnswersBeforeCleanup(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	if r := e.do("alice", "GET", "/v1/systems/hpc/ls"+dir, nil); r.status != 200 || strings.Contains(string(r.body), "up.txt") {
		t.Fatalf("listing before: %d %s", r.status, r.body)
	}
	rec := &answerRecorder{ResponseRecorder: httptest.NewRecorder()}
	rec.pushed = func(status int, hdr http.Header, body string) {
		if status != http.StatusCreated || !strings.Contains(body, `"sha256"`) {
			t.Errorf("pushed %d %q, want the whole 201 answer", status, body)
		}
		if n, err := strconv.Atoi(hdr.Get("Content-Length")); err != nil || n != len(body) {
			t.Errorf("pushed Content-Length %q for a body of %d bytes", hdr.Get("Content-Length"), len(body))
		}
		if r := e.do("alice", "GET", "/v1/systems/hpc/ls"+dir, nil); r.status != 200 || !strings.Contains(string(r.body), "up.txt") {
			t.Errorf("a listing once the answer is out: %d %s, want up.txt in it", r.status, r.body)
		}
	}
	req := httptest.NewRequest("PUT", "/v1/systems/hpc/content"+dir+"/up.txt", strings.NewReader("hello, world\n"))
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	e.api.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("upload: %d %s", rec.Code, rec.Body)
	}
	if rec.flushes == 0 {
		t.Fatal("the answer was pushed only when the handler returned, after its cleanup")
	}
}
