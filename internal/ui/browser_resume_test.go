package ui_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// cutProxy stands between Chromium and the service. It forwards every request, and the first
// time more than cutAt bytes of PATCH bodies have gone through it cuts the browser's connection
// in the middle of that PATCH (the service gets the body up to there) and then refuses every
// request, as a dead network would, until restore. It records each tus request it forwards.
type cutProxy struct {
	rp    *httputil.ReverseProxy
	cutAt int64

	sent atomic.Int64
	down atomic.Bool
	cut  chan struct{}
	once sync.Once

	mu  sync.Mutex
	log []string // "POST /v1/.../uploads", "PATCH <offset>"
}

var errCut = errors.New("cut by the proxy")

// cutReader passes a PATCH body on until the proxy's byte count passes cutAt.
type cutReader struct {
	p *cutProxy
	r io.ReadCloser
}

func (c cutReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if c.p.sent.Add(int64(n)) <= c.p.cutAt {
		return n, err
	}
	cut := false
	c.p.once.Do(func() { // the first time only
		cut = true
		c.p.down.Store(true)
		close(c.p.cut)
	})
	if cut {
		return n, errCut
	}
	return n, err
}

func (c cutReader) Close() error { return c.r.Close() }

func (p *cutProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() {
		panic(http.ErrAbortHandler) // the connection drops without an answer
	}
	switch {
	case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/uploads"):
		p.record("POST")
	case r.Method == "PATCH":
		p.record("PATCH " + r.Header.Get("Upload-Offset"))
		r.Body = cutReader{p, r.Body}
	}
	p.rp.ServeHTTP(w, r)
}

func (p *cutProxy) record(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, s)
}

func (p *cutProxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.log...)
}

// TestBrowserUploadResumesAfterCut uploads 200 MiB through the file picker with a proxy in
// front of the service that cuts the connection halfway through and stays down: the page
// gives up, keeping the upload's URL. The network comes back, the page is reloaded and the
// same file chosen again: the page asks the server's committed offset and sends the rest
// (the proxy sees one tus POST only, and a PATCH from an offset past 0 after the reload);
// the bytes on the server equal the file's.
func TestBrowserUploadResumesAfterCut(t *testing.T) {
	e, _ := newUIEnv(t, map[string]string{"in/": ""})
	ctx := e.ctx
	const size = 200 << 20
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	local := filepath.Join(t.TempDir(), "big-upload.bin")
	if err := os.WriteFile(local, payload, 0o600); err != nil {
		t.Fatal(err)
	}

	target, _ := url.Parse(e.base)
	p := &cutProxy{rp: httputil.NewSingleHostReverseProxy(target), cutAt: size / 2, cut: make(chan struct{})}
	p.rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String() // same host: the session cookie goes along

	page := base + "/ui/#/hpc/" + strings.TrimPrefix(filepath.Join(e.dir, "in"), "/")
	openPage := func() {
		step(t, ctx, "blank", chromedp.Navigate("about:blank")) // a load, not a hash change
		step(t, ctx, "open the page through the proxy", chromedp.Navigate(page))
		waitJS(t, ctx, "the empty folder", `document.getElementById("count").textContent === "0 entries" && !document.getElementById("app").getAttribute("aria-busy")`)
	}
	openPage()
	step(t, ctx, "choose the file", chromedp.SetUploadFiles(chromedp.ID("upload-input"), []string{local}))
	<-p.cut
	waitJS(t, ctx, "the page to give up", `document.getElementById("upload-status").textContent === "Uploaded 0 of 1."`)
	if n := evalJS[int](t, ctx, `Object.keys(localStorage).filter((k) => k.startsWith("sshapi.tus")).length`); n != 1 {
		t.Fatalf("%d resume entries in localStorage after the cut, want 1", n)
	}
	before := len(p.requests())

	p.down.Store(false)
	openPage() // a reload
	step(t, ctx, "choose the same file again", chromedp.SetUploadFiles(chromedp.ID("upload-input"), []string{local}))
	// 100 MiB more through SSH on a shared machine can take longer than waitJS waits: follow
	// the page's progress until it says the upload ended.
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(time.Second) {
		s := evalJS[string](t, ctx, `document.getElementById("upload-status").textContent`)
		if strings.HasPrefix(s, "Uploaded ") {
			if s != "Uploaded 1 of 1." {
				t.Fatalf("after the reload: %q: %s", s, evalJS[string](t, ctx, `document.getElementById("error-text").textContent`))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reload the upload is still at %q", s)
		}
	}
	waitJS(t, ctx, "the uploaded file", rowJS("big-upload.bin")+` !== undefined`)

	log := p.requests()
	posts, resumedAt := 0, int64(-1)
	for i, s := range log {
		if s == "POST" {
			posts++
		}
		if i >= before && resumedAt < 0 && strings.HasPrefix(s, "PATCH ") {
			resumedAt, _ = strconv.ParseInt(strings.TrimPrefix(s, "PATCH "), 10, 64)
		}
	}
	// The service may have committed the last read the proxy passed on past cutAt.
	if posts != 1 || resumedAt <= 0 || resumedAt > size/2+1<<20 {
		t.Fatalf("tus requests through the proxy %v: want one POST and, after the reload, a PATCH from an offset in (0, %d]", log, size/2+1<<20)
	}
	t.Logf("resumed at offset %d of %d after the reload (%d tus requests)", resumedAt, size, len(log))
	b, err := os.ReadFile(filepath.Join(e.dir, "in", "big-upload.bin"))
	if err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("bytes on the server differ (%d of %d): %v", len(b), size, err)
	}
}
