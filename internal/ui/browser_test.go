package ui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/oidctest"
	"github.com/sshapi/sshapi/internal/service"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// xssName is a file name that is markup: the listing must show it as text.
const xssName = `<img src=x onerror=alert(1)>`

// newChromium starts Debian's Chromium (scripts/install-deps installs it) headless at
// 1280×800; as root it needs --no-sandbox.
func newChromium(t testing.TB) context.Context {
	t.Helper()
	exe := "/usr/bin/chromium"
	if _, err := os.Stat(exe); err != nil {
		t.Fatalf("chromium is missing (scripts/install-deps installs it): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-gpu", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil { // starts the browser on this long-lived context
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// step runs actions with a deadline, failing the test with what was being done.
func step(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitJS waits until expr is truthy in the page, across navigations (an evaluation that
// meets a page being replaced is tried again).
func waitJS(t testing.TB, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		ok, err := chromedp.Run(c, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()

		if err == nil && ok {
			return
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second) // the page may be what hangs
	defer cancel()
	state, _ := chromedp.Run(c, chromedp.Evaluate[string](`document.body.innerText`))
	t.Fatalf("waiting for %s (%s): %v\npage text: %.1500s", what, expr, lastErr, state)
}

func evalJS[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot writes the page as PNG into $SSHAPI_SCREENSHOTS (make screenshots sets docs/img)
// or build/ui-screenshots.
func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SSHAPI_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "build", "ui-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rowSelector finds the listing row whose name cell is exactly name.
func rowJS(name string) string {
	n, _ := json.Marshal(name)
	return fmt.Sprintf(`[...document.querySelectorAll("#viewport .row .c-name span:last-child")].find(e => e.textContent === %s)`, n)
}

// TestBrowser drives the page in Chromium against a real sshd and a real OpenID Connect
// provider: sign in, browse, the hostile file name shown inert, view and download, an uploaded
// HTML file never executed, new folder, rename, delete, a cross-site POST with the cookie
// refused, and the phone layout. It writes screenshots of the main screens.
func TestBrowser(t *testing.T) {
	sshd := sshtest.New(t, sshtest.Options{})
	dir := sshd.MkTemp(t)
	for name, content := range map[string]string{
		"hello.txt": "hello from the cluster\n",
		xssName:     "markup in a name\n",
		"page.html": `<html><body><script>document.title = "pwned"; alert("pwned")</script></body></html>`,
		"data.csv":  "a,b\n1,2\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "results"), 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Join(dir, "results"), 0o777)

	addr := oidctest.FreeAddr(t)
	base := "http://" + addr
	op := oidctest.Start(t, base+"/ui/callback")
	_, dataDir := startService(t, addr, op)

	// The user's system and credential, registered through the API with a bearer token of the
	// provider's subject (what a gateway would do).
	sec, err := service.DevSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.IssueHS256(sec, oidctest.Subject, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	bearer := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
	sys, _ := json.Marshal(map[string]any{"id": "hpc", "host": sshd.Host, "port": sshd.Port, "host_keys": []string{sshd.AuthorizedHostKey()}})
	if code, body := do(t, &http.Client{}, "POST", base+"/v1/systems", string(sys), bearer); code != 201 {
		t.Fatalf("create system: %d %s", code, body)
	}
	cred, _ := json.Marshal(map[string]any{"username": sshd.User, "private_key": string(sshd.PrivateKeyPEM)})
	if code, body := do(t, &http.Client{}, "PUT", base+"/v1/systems/hpc/credential", string(cred), bearer); code/100 != 2 {
		t.Fatalf("put credential: %d %s", code, body)
	}

	ctx := newChromium(t)
	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}

	// Sign in at the provider's own form.
	step(t, ctx, "open the page", chromedp.Navigate(base+"/ui/"))
	waitJS(t, ctx, "the sign-in screen", `!document.getElementById("signin").hidden && !document.getElementById("signin-provider").hidden`)
	screenshot(t, ctx, "ui-signin")
	step(t, ctx, "go to the provider", chromedp.Click(chromedp.CSS(`#signin-provider a`)))
	waitJS(t, ctx, "the provider's login form", `document.querySelector("#username") !== null`)
	step(t, ctx, "sign in at the provider",
		chromedp.SendKeys(chromedp.CSS("#username"), op.Username),
		chromedp.SendKeys(chromedp.CSS("#password"), oidctest.Password),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
	waitJS(t, ctx, "the app after sign-in", `location.pathname === "/ui/" && !document.getElementById("app").hidden`)
	if got := evalJS[string](t, ctx, `document.getElementById("user").textContent`); got != oidctest.Subject {
		t.Fatalf("signed in as %q", got)
	}
	// No token or session id is reachable from script.
	if got := evalJS[string](t, ctx, `document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage)`); strings.Contains(got, "sshapi-session") || strings.Contains(got, "eyJ") {
		t.Fatalf("credentials visible to script: %q", got)
	}

	// Browse the directory.
	hash := "#/hpc/" + strings.TrimPrefix(dir, "/")
	step(t, ctx, "open the directory", chromedp.Evaluate[chromedp.Void](`location.hash = `+jsString(hash)))
	waitJS(t, ctx, "the listing", rowJS("hello.txt")+` !== undefined`)
	waitJS(t, ctx, "the hostile name as text", rowJS(xssName)+` !== undefined`)
	if n := evalJS[int](t, ctx, `document.querySelectorAll("#viewport img").length`); n != 0 {
		t.Fatalf("the file name became %d img elements", n)
	}
	crumbs := evalJS[string](t, ctx, `document.getElementById("crumbs").textContent`)
	if !strings.Contains(crumbs, filepath.Base(dir)) {
		t.Fatalf("breadcrumbs %q", crumbs)
	}
	screenshot(t, ctx, "ui-browse")

	// View a text file; then the HTML file, which must show as text and run nothing.
	step(t, ctx, "select hello.txt", chromedp.Evaluate[chromedp.Void](rowJS("hello.txt")+`.click()`))
	waitJS(t, ctx, "the details", `!document.getElementById("details").hidden`)
	step(t, ctx, "view hello.txt", chromedp.Click(chromedp.ID("act-view")))
	waitJS(t, ctx, "the preview", `document.querySelector("#preview pre")?.textContent === "hello from the cluster\n"`)
	screenshot(t, ctx, "ui-details")

	step(t, ctx, "select page.html", chromedp.Evaluate[chromedp.Void](rowJS("page.html")+`.click()`))
	step(t, ctx, "view page.html", chromedp.Click(chromedp.ID("act-view")))
	waitJS(t, ctx, "the HTML as text", `document.querySelector("#preview pre")?.textContent.includes("<script>")`)
	// Opening the file's URL itself (as a link would) downloads it or renders it sandboxed.
	hdr := evalJS[string](t, ctx, `fetch(document.getElementById("act-download").href).then(r => [r.headers.get("content-disposition"), r.headers.get("content-security-policy"), r.headers.get("x-content-type-options")].join("|"))`)
	if !strings.HasPrefix(hdr, "attachment") || !strings.Contains(hdr, "sandbox") || !strings.HasSuffix(hdr, "nosniff") {
		t.Fatalf("content headers: %q", hdr)
	}

	// Download hello.txt through the page's link and compare the bytes.
	dl := t.TempDir()
	progress := chromedp.BrowserEvents(ctx, browser.DownloadProgress)
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dl, EventsEnabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "select hello.txt again", chromedp.Evaluate[chromedp.Void](rowJS("hello.txt")+`.click()`))
	step(t, ctx, "download", chromedp.Click(chromedp.ID("act-download")))
	deadline := time.After(30 * time.Second)
	var got []byte
	for ev, err := range progress {
		if err != nil {
			t.Fatal(err)
		}
		if ev.State == browser.DownloadProgressStateCanceled {
			t.Fatal("download canceled")
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			if got, err = os.ReadFile(filepath.Join(dl, ev.GUID)); err != nil {
				t.Fatal(err)
			}
			break
		}
		select {
		case <-deadline:
			t.Fatal("download did not complete")
		default:
		}
	}
	if string(got) != "hello from the cluster\n" {
		t.Fatalf("downloaded %q", got)
	}

	// New folder, rename, delete: each checked on the server's disk.
	step(t, ctx, "new folder", chromedp.Click(chromedp.ID("btn-mkdir")))
	step(t, ctx, "name it", chromedp.SetValue(chromedp.ID("dlg-input"), "made-in-browser"), chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "the new folder", rowJS("made-in-browser")+` !== undefined`)
	if fi, err := os.Stat(filepath.Join(dir, "made-in-browser")); err != nil || !fi.IsDir() {
		t.Fatalf("new folder on disk: %v", err)
	}
	step(t, ctx, "select data.csv", chromedp.Evaluate[chromedp.Void](rowJS("data.csv")+`.click()`))
	step(t, ctx, "rename", chromedp.Click(chromedp.ID("act-rename")))
	step(t, ctx, "new name", chromedp.SetValue(chromedp.ID("dlg-input"), "renamed.csv"), chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "the renamed file", rowJS("renamed.csv")+` !== undefined`)
	if b, err := os.ReadFile(filepath.Join(dir, "renamed.csv")); err != nil || string(b) != "a,b\n1,2\n" {
		t.Fatalf("renamed file on disk: %q %v", b, err)
	}
	step(t, ctx, "select the folder's row", chromedp.Evaluate[chromedp.Void](`(() => { const r = `+rowJS("renamed.csv")+`; r.click(); })()`))
	step(t, ctx, "delete", chromedp.Click(chromedp.ID("act-delete")))
	waitJS(t, ctx, "the confirmation", `document.getElementById("dlg").open`)
	screenshot(t, ctx, "ui-delete-confirm")
	step(t, ctx, "confirm", chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "the file gone", rowJS("renamed.csv")+` === undefined && `+rowJS("hello.txt")+` !== undefined`)
	if _, err := os.Stat(filepath.Join(dir, "renamed.csv")); !os.IsNotExist(err) {
		t.Fatalf("deleted file still on disk: %v", err)
	}

	// An error from the API is shown in words.
	step(t, ctx, "new folder that exists", chromedp.Click(chromedp.ID("btn-mkdir")))
	step(t, ctx, "existing name", chromedp.SetValue(chromedp.ID("dlg-input"), "results"), chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "the error", `!document.getElementById("error").hidden && document.getElementById("error-text").textContent.length > 10`)
	screenshot(t, ctx, "ui-error")

	// Upload a file through the file picker, resumably (tus): the first PATCH is cut after
	// half its body reached the server (the page's XMLHttpRequest then fails as on a dropped
	// connection); the page asks the committed offset with HEAD, sends the rest, and the server
	// verifies the SHA-256 and renames the file into place. The progress shown moves within a
	// PATCH (XHR upload progress): the page sends the file in one PATCH.
	payload := make([]byte, 10<<20+17)
	_, _ = rand.Read(payload)
	local := filepath.Join(t.TempDir(), "upload.bin")
	if err := os.WriteFile(local, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "dismiss the error", chromedp.Click(chromedp.ID("error-close")))
	evalJS[bool](t, ctx, `(() => {
		const open = XMLHttpRequest.prototype.open, send = XMLHttpRequest.prototype.send;
		window.cuts = 0;
		XMLHttpRequest.prototype.open = function (method, ...rest) {
			this.method = method;
			return open.call(this, method, ...rest);
		};
		XMLHttpRequest.prototype.send = function (body) {
			if (this.method === "PATCH" && window.cuts === 0) {
				window.cuts++;
				const failed = this.onerror;
				this.onload = () => {
					window.atCut = document.getElementById("upload-status").textContent;
					failed();
				};
				return send.call(this, body.slice(0, body.size / 2));
			}
			return send.call(this, body);
		};
		return true;
	})()`)
	step(t, ctx, "choose a file", chromedp.SetUploadFiles(chromedp.ID("upload-input"), []string{local}))
	waitJS(t, ctx, "the uploaded file", rowJS("upload.bin")+` !== undefined && document.getElementById("upload-status").textContent.startsWith("Uploaded 1 of 1")`)
	if b, err := os.ReadFile(filepath.Join(dir, "upload.bin")); err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("uploaded bytes differ on the server (%d of %d bytes): %v", len(b), len(payload), err)
	}
	if !evalJS[bool](t, ctx, `document.getElementById("error").hidden`) {
		t.Fatalf("upload error: %s", evalJS[string](t, ctx, `document.getElementById("error-text").textContent`))
	}
	if n := evalJS[int](t, ctx, `window.cuts`); n != 1 {
		t.Fatalf("%d PATCHes cut", n)
	}
	// The progress moved within the cut PATCH, before its answer: the half of the file it sent.
	if s := evalJS[string](t, ctx, `window.atCut`); !strings.HasSuffix(s, "(49%)") {
		t.Fatalf("progress shown when the cut PATCH's answer came: %q, want the 49%% it sent", s)
	}
	if n := evalJS[int](t, ctx, `Object.keys(localStorage).filter((k) => k.startsWith("sshapi.tus")).length`); n != 0 {
		t.Fatalf("%d resume entries left in localStorage after success", n)
	}
	screenshot(t, ctx, "ui-upload")

	// A 100,000-entry directory: the first screen comes from one page of the server's listing.
	big := filepath.Join(dir, "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 100_000 {
		f, err := os.Create(filepath.Join(big, fmt.Sprintf("f%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	t.Logf("created 100,000 files")
	started := time.Now()
	step(t, ctx, "open the big directory", chromedp.Evaluate[chromedp.Void](`location.hash = `+jsString(hash+"/big")))
	waitJS(t, ctx, "the first screen of the big directory", rowJS("f000000")+` !== undefined && document.getElementById("count").textContent === "100000 entries"`)
	firstScreen := time.Since(started)
	t.Logf("100,000-entry directory: first screen after %v", firstScreen)
	t.Logf("listing requests: %s", evalJS[string](t, ctx, `performance.getEntriesByType("resource").filter(e => e.name.includes("/big")).map(e => Math.round(e.duration) + " ms, " + e.encodedBodySize + " bytes").join("; ")`))
	// The bound is loose: the machines that run this are shared (see the README for the
	// measured time and what it costs).
	if firstScreen > 10*time.Second {
		t.Errorf("first screen of a 100,000-entry directory took %v", firstScreen)
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll("#viewport .row").length`); n > 200 {
		t.Errorf("%d rows in the DOM: the table is not virtual", n)
	}
	step(t, ctx, "scroll to the end", chromedp.Evaluate[chromedp.Void](`document.getElementById("viewport").scrollTop = 1e9`))
	waitJS(t, ctx, "the last entries", rowJS("f099999")+` !== undefined`)
	if n := evalJS[int](t, ctx, `performance.getEntriesByType("resource").filter(e => e.name.includes("/big")).length`); n > 4 {
		t.Errorf("%d listing requests for two screens of the big directory", n)
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll("#viewport .row").length`); n > 200 {
		t.Errorf("%d rows in the DOM at the end: the table is not virtual", n)
	}
	screenshot(t, ctx, "ui-big-directory")
	step(t, ctx, "back", chromedp.Evaluate[chromedp.Void](`location.hash = `+jsString(hash)))
	waitJS(t, ctx, "the directory again", rowJS("hello.txt")+` !== undefined`)

	// A page of another site posts to the API with the browser's cookie: refused, nothing made.
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		target := base + "/v1/systems/hpc/ops/mkdir"
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s" enctype="text/plain"><input name='{"path":"%s/evil","x":"' value='"}'></form>
<script>fetch(%q, {method: "POST", credentials: "include", mode: "no-cors", body: JSON.stringify({path: %q})}).finally(() => { document.title = "sent"; document.getElementById("f").submit(); });</script>`,
			target, dir, target, dir+"/evil2")
	}))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	evil.Listener = ln
	evil.Start()
	defer evil.Close()
	step(t, ctx, "visit the other site", chromedp.Navigate(evil.URL))
	waitJS(t, ctx, "the form posted", `location.href.startsWith(`+jsString(base)+`)`)
	for _, n := range []string{"evil", "evil2"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Fatalf("a cross-site POST created %s: %v", n, err)
		}
	}

	// Keyboard: the table takes focus, arrows select, Enter opens a folder, Backspace goes up.
	step(t, ctx, "back to the directory", chromedp.Navigate(base+"/ui/"+hash))
	waitJS(t, ctx, "the listing again", rowJS("results")+` !== undefined`)
	down := evalJS[int](t, ctx, `[...document.querySelectorAll("#viewport .row .c-name span:last-child")].findIndex(e => e.textContent === "results") + 1`)
	step(t, ctx, "focus the table", chromedp.Focus(chromedp.ID("viewport")))
	step(t, ctx, "arrow down to results", chromedp.KeyEvent(strings.Repeat(kb.ArrowDown, down)))
	step(t, ctx, "open it", chromedp.KeyEvent(kb.Enter))
	waitJS(t, ctx, "inside results", `document.querySelector("#crumbs [aria-current=page]")?.textContent === "results"`)
	step(t, ctx, "go up", chromedp.Focus(chromedp.ID("viewport")), chromedp.KeyEvent(kb.Backspace))
	waitJS(t, ctx, "back in the directory", rowJS("results")+` !== undefined`)

	// Phone width: the same listing, nothing wider than the screen.
	step(t, ctx, "phone viewport", chromedp.EmulateViewport(390, 844), chromedp.Navigate(base+"/ui/"+hash))
	waitJS(t, ctx, "the listing on a phone", rowJS("hello.txt")+` !== undefined`)
	if w := evalJS[int](t, ctx, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("phone layout overflows by %d px", w)
	}
	screenshot(t, ctx, "ui-phone")

	// Sign out: back to the sign-in screen, and the session is gone on the server.
	step(t, ctx, "sign out", chromedp.Click(chromedp.CSS(`#who button[type="submit"]`)))
	waitJS(t, ctx, "the sign-in screen again", `!document.getElementById("signin").hidden`)
	if code := evalJS[int](t, ctx, `fetch("/v1/systems").then(r => r.status)`); code != 401 {
		t.Fatalf("the API after sign-out: %d", code)
	}

	if n := dialogs.Load(); n != 0 {
		t.Fatalf("%d script dialogs opened: user content ran script", n)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func ptr[T any](v T) *T { return &v }
