package ui_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/sshapi/sshapi/internal/oidctest"
)

// TestBrowserShareAndTransfer: a link made in the share dialog downloads the file in a fresh
// browser context with no session; a grant is listed and revoked; what another user shared
// shows under "Shared with me"; and a transfer submitted in the two-pane view is watched to
// its end over server-sent events, with the notice.
func TestBrowserShareAndTransfer(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: several progress events
	e, sshd := newUIEnv(t, map[string]string{
		"report.txt":   "the shared report\n",
		"src/data.bin": string(payload),
		"dest/":        "",
	})
	ctx, dir := e.ctx, e.dir
	hash := "#/hpc/" + strings.TrimPrefix(dir, "/")
	step(t, ctx, "open the directory", chromedp.Evaluate[chromedp.Void](`location.hash = `+jsString(hash)))
	waitJS(t, ctx, "the listing", rowJS("report.txt")+` !== undefined`)

	// A link, made in the dialog.
	click(t, ctx, "select report.txt", rowJS("report.txt"))
	step(t, ctx, "share", chromedp.Click(chromedp.ID("act-share")))
	waitJS(t, ctx, "the share dialog", `document.getElementById("share").open && document.getElementById("link-list").textContent.includes("No links")`)
	// A refused link: the problem, in words, naming the field, inside the dialog.
	setValue(t, ctx, "link-hours", "100000")
	step(t, ctx, "create a link for too long", chromedp.Click(chromedp.ID("link-create")))
	waitJS(t, ctx, "the refusal in the dialog", `document.getElementById("share-status").textContent === "Bad Request: expires_in_s: must be between 1 and 2592000"`)
	setValue(t, ctx, "link-hours", "2")
	setValue(t, ctx, "link-uses", "3")
	step(t, ctx, "create a link", chromedp.Click(chromedp.ID("link-create")))
	waitJS(t, ctx, "the link", `document.getElementById("link-url").value.includes("/v1/links/") && document.getElementById("link-list").textContent.includes("of 3 times")`)
	link := evalJS[string](t, ctx, `document.getElementById("link-url").value`)
	// A grant, listed, then revoked.
	setValue(t, ctx, "grant-principal", "bob")
	step(t, ctx, "grant bob", chromedp.Click(chromedp.ID("grant-add")))
	waitJS(t, ctx, "the grant", `document.getElementById("grant-list").textContent.includes("user:bob: read")`)
	screenshot(t, ctx, "ui-share")
	step(t, ctx, "revoke bob", chromedp.Click(chromedp.CSS(`#grant-list button`)))
	waitJS(t, ctx, "the grant gone", `document.getElementById("grant-list").textContent.includes("Not shared with anyone")`)
	step(t, ctx, "close", chromedp.Click(chromedp.ID("share-close")))
	step(t, ctx, "dismiss the refusal's error line", chromedp.Click(chromedp.ID("error-close")))

	// The link in a fresh browser (its own profile): no session, and the file downloads.
	fresh := newChromium(t)
	step(t, fresh, "open the service without a session", chromedp.Navigate(e.base+"/ui/"))
	waitJS(t, fresh, "the sign-in screen", `!document.getElementById("signin").hidden`)
	if code := evalJS[int](t, fresh, `fetch("/v1/systems").then(r => r.status)`); code != 401 {
		t.Fatalf("the fresh context is signed in: %d", code)
	}
	got := evalJS[string](t, fresh, `fetch(`+jsString(link)+`).then(r => r.ok ? r.text() : "HTTP " + r.status)`)
	if got != "the shared report\n" {
		t.Fatalf("the link gave %q", got)
	}

	// Shared with me: bob shares a folder of his system with the signed-in user.
	e.register(t, sshd, "bob", "bobsys")
	g, _ := json.Marshal(map[string]any{"principal": "user:" + oidctest.Subject, "path": dir + "/src", "access": "read"})
	if code, body := do(t, &http.Client{}, "POST", e.base+"/v1/systems/bobsys/grants", string(g), e.bearer(t, "bob")); code != 201 {
		t.Fatalf("bob's grant: %d %s", code, body)
	}
	step(t, ctx, "shared with me", chromedp.Evaluate[chromedp.Void](`location.hash = "#shared"`))
	waitJS(t, ctx, "bob's share", `document.getElementById("shared-rows").textContent.includes("bobsys") && document.getElementById("shared-rows").textContent.includes(`+jsString(dir+"/src")+`)`)
	screenshot(t, ctx, "ui-shared")

	// Transfers: from hpc:dir/src to scratch:dir/dest, watched to the end.
	step(t, ctx, "transfers", chromedp.Evaluate[chromedp.Void](`location.hash = "#transfers"`))
	// Both panes' first listings must be in before a pane is pointed elsewhere. The Open
	// buttons are pressed from the page's script once it is idle, not by a mouse event at
	// coordinates read a moment before (in CI a click once missed, the pane stayed where it
	// was, and nothing in the page was wrong).
	waitJS(t, ctx, "the two panes", `document.getElementById("src-system").options.length >= 2 && document.getElementById("src-count").textContent !== "" && document.getElementById("dst-count").textContent !== "" && !document.getElementById("app").getAttribute("aria-busy")`)
	pane := func(side, system, path string) {
		step(t, ctx, "choose "+side, chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById(`+jsString(side+"-system")+`); s.value = `+jsString(system)+`; })()`))
		setValue(t, ctx, side+"-path", path)
		click(t, ctx, "open "+side, `document.getElementById(`+jsString(side+"-go")+`)`)
	}
	pane("src", "hpc", dir+"/src")
	waitJS(t, ctx, "the source folder", `[...document.querySelectorAll("#src-list label")].some(l => l.textContent === "data.bin")`)
	pane("dst", "scratch", dir+"/dest")
	waitJS(t, ctx, "the destination folder", `document.getElementById("dst-path").value === `+jsString(dir+"/dest")+` && document.getElementById("dst-count").textContent === "0 entries."`)
	click(t, ctx, "select data.bin", `[...document.querySelectorAll("#src-list label")].find(l => l.textContent === "data.bin")`)
	step(t, ctx, "submit", chromedp.Click(chromedp.ID("tr-submit")))
	waitJS(t, ctx, "the transfer listed", `document.querySelector("#tr-rows tr .tr-status") !== null`)
	waitJS(t, ctx, "the transfer finished", `document.querySelector("#tr-rows tr .tr-status")?.textContent === "succeeded" && document.getElementById("notice").textContent.includes("finished")`)
	screenshot(t, ctx, "ui-transfers")
	if b, err := os.ReadFile(filepath.Join(dir, "dest", "data.bin")); err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("transferred %d bytes of %d: %v", len(b), len(payload), err)
	}
	if n := evalJS[int](t, ctx, `performance.getEntriesByType("resource").filter(e => e.name.includes("/events")).length`); n == 0 {
		t.Fatal("the page did not follow the transfer's event stream")
	}
	// Cancel: a 1 GiB sparse file takes long enough to be caught running.
	if err := os.Truncate(filepath.Join(dir, "src", "data.bin"), 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "src", "data.bin"), filepath.Join(dir, "src", "huge.bin")); err != nil {
		t.Fatal(err)
	}
	click(t, ctx, "reopen the source", `document.getElementById("src-go")`)
	click(t, ctx, "select huge.bin", `[...document.querySelectorAll("#src-list label")].find(l => l.textContent === "huge.bin")`)
	step(t, ctx, "submit the big one", chromedp.Click(chromedp.ID("tr-submit")))
	click(t, ctx, "cancel it", `document.querySelector("#tr-rows tr:first-child button.danger")`)
	waitJS(t, ctx, "the transfer canceled", `document.querySelector("#tr-rows tr:first-child .tr-status")?.textContent === "canceled" && document.getElementById("notice").textContent.includes("was canceled")`)
	if _, err := os.Stat(filepath.Join(dir, "dest", "huge.bin")); !os.IsNotExist(err) {
		t.Fatalf("a canceled transfer left huge.bin: %v", err)
	}

	// The transfers view at phone width: the panes stack, nothing wider than the screen.
	step(t, ctx, "phone viewport", chromedp.EmulateViewport(390, 844), chromedp.Navigate(e.base+"/ui/#transfers"))
	waitJS(t, ctx, "the transfers on a phone", `[...document.querySelectorAll("#tr-rows .tr-status")].map(s => s.textContent).join() === "canceled,succeeded"`)
	if w := evalJS[int](t, ctx, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("phone layout of the transfers overflows by %d px", w)
	}
	screenshot(t, ctx, "ui-transfers-phone")
	if !evalJS[bool](t, ctx, `document.getElementById("error").hidden`) {
		t.Fatalf("error shown: %s", evalJS[string](t, ctx, `document.getElementById("error-text").textContent`))
	}
}
