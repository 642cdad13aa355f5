package ui_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserUploadHalvesOnBodyLimit uploads 6 MiB through the page behind a proxy that refuses
// request bodies over 2 MiB with 413 and forwards the rest, as a proxy's body limit (nginx's
// client_max_body_size) does: the page halves its PATCHes until they pass and the upload
// completes with the file's bytes.
func TestBrowserUploadHalvesOnBodyLimit(t *testing.T) {
	e, _ := newUIEnv(t, map[string]string{"in/": ""})
	ctx := e.ctx
	const size, limit = 6 << 20, 2 << 20
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	local := filepath.Join(t.TempDir(), "limited.bin")
	if err := os.WriteFile(local, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(e.base)
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var patches []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refused := r.ContentLength > limit
		if r.Method == http.MethodPatch {
			mu.Lock()
			patches = append(patches, fmt.Sprintf("%d refused=%v", r.ContentLength, refused))
			mu.Unlock()
		}
		if refused {
			http.Error(w, "413 Request Entity Too Large", http.StatusRequestEntityTooLarge)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	page := "http://" + ln.Addr().String() + "/ui/#/hpc/" + strings.TrimPrefix(filepath.Join(e.dir, "in"), "/")
	step(t, ctx, "open the page through the proxy", chromedp.Navigate(page))
	waitJS(t, ctx, "the empty folder", `document.getElementById("count").textContent === "0 entries" && !document.getElementById("app").getAttribute("aria-busy")`)
	step(t, ctx, "choose the file", chromedp.SetUploadFiles(chromedp.ID("upload-input"), []string{local}))
	waitJS(t, ctx, "the upload to end", `document.getElementById("upload-status").textContent.startsWith("Uploaded ")`)
	if s := evalJS[string](t, ctx, `document.getElementById("upload-status").textContent`); s != "Uploaded 1 of 1." {
		t.Fatalf("%q: %s (PATCHes %v)", s, evalJS[string](t, ctx, `document.getElementById("error-text").textContent`), patches)
	}
	mu.Lock()
	got := fmt.Sprint(patches)
	mu.Unlock()
	want := "[6291456 refused=true 3145728 refused=true 1572864 refused=false 1572864 refused=false 1572864 refused=false 1572864 refused=false]"
	if got != want {
		t.Fatalf("PATCHes through the proxy %s, want %s", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "in", "limited.bin")); err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("bytes on the server differ (%d of %d): %v", len(b), size, err)
	}
}
