package ui_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/oidctest"
	"github.com/sshapi/sshapi/internal/service"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// uiEnv is a running service with a real sshd and OpenID Connect provider, the signed-in
// user's systems "hpc" and "scratch" (the same sshd), and Chromium signed in.
type uiEnv struct {
	base    string
	dir     string // a directory on the sshd, owned by its user
	ctx     context.Context
	secret  []byte
	dialogs *atomic.Int32 // script dialogs opened: user content that ran
}

// bearer returns API headers with a token of user.
func (e *uiEnv) bearer(t testing.TB, user string) map[string]string {
	t.Helper()
	tok, err := auth.IssueHS256(e.secret, user, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
}

// register creates system id for user on sshd through the API.
func (e *uiEnv) register(t testing.TB, sshd *sshtest.Server, user, id string) {
	t.Helper()
	h := e.bearer(t, user)
	sys, _ := json.Marshal(map[string]any{"id": id, "host": sshd.Host, "port": sshd.Port, "host_keys": []string{sshd.AuthorizedHostKey()}})
	if code, body := do(t, &http.Client{}, "POST", e.base+"/v1/systems", string(sys), h); code != 201 {
		t.Fatalf("create system %s: %d %s", id, code, body)
	}
	cred, _ := json.Marshal(map[string]any{"username": sshd.User, "private_key": string(sshd.PrivateKeyPEM)})
	if code, body := do(t, &http.Client{}, "PUT", e.base+"/v1/systems/"+id+"/credential", string(cred), h); code/100 != 2 {
		t.Fatalf("put credential %s: %d %s", id, code, body)
	}
}

// writeTree creates files (relative path → content, "/" suffix for a folder) under dir.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newUIEnv starts everything and signs in at the provider's form; files (relative path →
// content, "/" suffix for a folder) are created in dir first, owned by the sshd's user.
func newUIEnv(t testing.TB, files map[string]string) (*uiEnv, *sshtest.Server) {
	t.Helper()
	sshd := sshtest.New(t, sshtest.Options{})
	dir := sshd.MkTemp(t)
	writeTree(t, dir, files)
	if out, err := exec.Command("chown", "-R", sshd.User+":", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	addr := oidctest.FreeAddr(t)
	e := &uiEnv{base: "http://" + addr, dir: dir, dialogs: new(atomic.Int32)}
	op := oidctest.Start(t, e.base+"/ui/callback")
	_, dataDir := startService(t, addr, op)
	sec, err := service.DevSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	e.secret = sec
	e.register(t, sshd, oidctest.Subject, "hpc")
	e.register(t, sshd, oidctest.Subject, "scratch")

	e.ctx = newChromium(t)
	if err := chromedp.Listen(e.ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			e.dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	step(t, e.ctx, "open the page", chromedp.Navigate(e.base+"/ui/"))
	waitJS(t, e.ctx, "the sign-in screen", `!document.getElementById("signin-provider").hidden`)
	step(t, e.ctx, "go to the provider", chromedp.Click(chromedp.CSS(`#signin-provider a`)))
	waitJS(t, e.ctx, "the provider's login form", `document.querySelector("#username") !== null`)
	step(t, e.ctx, "sign in at the provider",
		chromedp.SendKeys(chromedp.CSS("#username"), op.Username),
		chromedp.SendKeys(chromedp.CSS("#password"), oidctest.Password),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
	waitJS(t, e.ctx, "the app after sign-in", `location.pathname === "/ui/" && !document.getElementById("app").hidden`)
	return e, sshd
}

// click waits until the page is not busy (a listing being refreshed, an operation under way)
// and the element expr evaluates to exists, and clicks it, in one evaluation.
func click(t testing.TB, ctx context.Context, what, expr string) {
	t.Helper()
	waitJS(t, ctx, what, `(() => { try { if (document.getElementById("app").getAttribute("aria-busy")) return false; const x = (`+expr+`); if (x == null) return false; x.click(); return true } catch { return false } })()`)
}

// setValue sets a form field's value as typing would.
func setValue(t testing.TB, ctx context.Context, id, v string) {
	t.Helper()
	step(t, ctx, "fill "+id, chromedp.Evaluate[chromedp.Void](`(() => { const i = document.getElementById(`+jsString(id)+`); i.value = `+jsString(v)+`; i.dispatchEvent(new Event("input")); })()`))
}

// tarNames lists a .tar.gz's members (directories end with "/"), with file contents.
func tarNames(t testing.TB, b []byte) []string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeDir {
			out = append(out, h.Name)
		} else {
			out = append(out, h.Name+"="+string(c))
		}
	}
}

// TestBrowserOperations drives the operations of the page in Chromium: sorting by size and
// time on the server, an SVG shown as text, editing with a conflict (412 shown in words, the
// user's text kept, reload, save), permissions, a selection downloaded as one archive, a folder
// copied as a transfer (with the notice when it ends), a move, and the delete of a selection.
func TestBrowserOperations(t *testing.T) {
	e, _ := newUIEnv(t, map[string]string{
		"small.txt":     "s",
		"medium.txt":    strings.Repeat("m", 5000),
		"large.bin":     strings.Repeat("L", 100_000),
		"notes.txt":     "v1\n",
		"image.svg":     `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>`,
		"proj/a.txt":    "A",
		"proj/sub/b.md": "B",
		"backup/":       "",
	})
	ctx, dir := e.ctx, e.dir
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "medium.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	hash := "#/hpc/" + strings.TrimPrefix(dir, "/")
	step(t, ctx, "open the directory", chromedp.Evaluate[chromedp.Void](`location.hash = `+jsString(hash)))
	waitJS(t, ctx, "the listing", rowJS("small.txt")+` !== undefined`)
	firstRow := `document.querySelector("#viewport .row[data-index='0'] .c-name span:last-child")?.textContent`

	// Sorting: the server orders; the first click on Size is largest first, the second smallest.
	click(t, ctx, "sort by size", `document.querySelector("button.sort[data-sort=size]")`)
	waitJS(t, ctx, "largest first", firstRow+` === "large.bin" && document.querySelector(".c-size[role=columnheader]").getAttribute("aria-sort") === "descending"`)
	if n := evalJS[int](t, ctx, `performance.getEntriesByType("resource").filter(e => e.name.includes("sort=size&order=desc")).length`); n == 0 {
		t.Fatal("sorting by size did not ask the server")
	}
	screenshot(t, ctx, "ui-sorted")
	click(t, ctx, "sort by size ascending", `document.querySelector("button.sort[data-sort=size]")`)
	waitJS(t, ctx, "smallest first", firstRow+` === "small.txt"`)
	click(t, ctx, "sort by time", `document.querySelector("button.sort[data-sort=time]")`)
	click(t, ctx, "sort by time ascending", `document.querySelector("button.sort[data-sort=time]")`)
	waitJS(t, ctx, "oldest first", firstRow+` === "medium.txt"`)
	click(t, ctx, "back to names", `document.querySelector("button.sort[data-sort=name]")`)
	waitJS(t, ctx, "name order", firstRow+` === "backup"`)

	// An SVG with script is shown as text, never rendered.
	click(t, ctx, "select image.svg", rowJS("image.svg"))
	step(t, ctx, "view it", chromedp.Click(chromedp.ID("act-view")))
	waitJS(t, ctx, "the SVG as text", `document.querySelector("#preview pre")?.textContent.includes("<script>")`)
	if n := evalJS[int](t, ctx, `document.querySelectorAll("#preview svg, #preview img").length`); n != 0 {
		t.Fatalf("the SVG became %d elements", n)
	}

	// Edit with a conflict: the file changes on the server while the editor is open.
	click(t, ctx, "select notes.txt", rowJS("notes.txt"))
	step(t, ctx, "edit", chromedp.Click(chromedp.ID("act-edit")))
	waitJS(t, ctx, "the editor", `document.getElementById("editor").open && document.getElementById("editor-text").value === "v1\n"`)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("changed on the server\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	setValue(t, ctx, "editor-text", "my edit\n")
	step(t, ctx, "save", chromedp.Click(chromedp.ID("editor-save")))
	waitJS(t, ctx, "the conflict in words", `document.getElementById("editor-status").textContent.includes("changed on the server since you opened it") && !document.getElementById("editor-reload").hidden`)
	if got := evalJS[string](t, ctx, `document.getElementById("editor-text").value`); got != "my edit\n" {
		t.Fatalf("the user's text was lost: %q", got)
	}
	screenshot(t, ctx, "ui-editor-conflict")
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "changed on the server\n" {
		t.Fatalf("a conflicting save wrote %q", b)
	}
	step(t, ctx, "reload", chromedp.Click(chromedp.ID("editor-reload")))
	waitJS(t, ctx, "the current version", `document.getElementById("editor-text").value === "changed on the server\n"`)
	setValue(t, ctx, "editor-text", "changed on the server\nand merged\n")
	step(t, ctx, "save again", chromedp.Click(chromedp.ID("editor-save")))
	waitJS(t, ctx, "the editor closed and the listing refreshed", `!document.getElementById("editor").open && `+rowJS("notes.txt")+`?.closest(".row").querySelector(".c-size").textContent === "33 B"`)
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "changed on the server\nand merged\n" {
		t.Fatalf("saved %q", b)
	}

	// Checksum on demand, then permissions.
	click(t, ctx, "select notes.txt", rowJS("notes.txt"))
	step(t, ctx, "checksum", chromedp.Click(chromedp.ID("act-checksum")))
	sum := sha256.Sum256([]byte("changed on the server\nand merged\n"))
	waitJS(t, ctx, "the checksum", `document.getElementById("checksum").textContent === "SHA-256: `+hex.EncodeToString(sum[:])+`"`)
	step(t, ctx, "permissions", chromedp.Click(chromedp.ID("act-chmod")))
	waitJS(t, ctx, "the mode dialog", `document.getElementById("dlg").open && document.getElementById("dlg-input").value === "0644"`)
	setValue(t, ctx, "dlg-input", "0600")
	step(t, ctx, "change", chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "the dialog closed", `!document.getElementById("dlg").open`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(filepath.Join(dir, "notes.txt"))
		if err == nil && fi.Mode().Perm() == 0o600 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mode on disk: %v %v", fi.Mode(), err)
		}
		time.Sleep(50 * time.Millisecond) // the page's request is in flight: nothing to await in the page
	}

	// A selection of a file and a folder downloads as one archive.
	click(t, ctx, "mark notes.txt", rowJS("notes.txt")+`.closest(".row").querySelector(".mark")`)
	click(t, ctx, "mark proj", rowJS("proj")+`.closest(".row").querySelector(".mark")`)
	waitJS(t, ctx, "the selection bar", `!document.getElementById("selbar").hidden && document.getElementById("sel-count").textContent === "2 selected"`)
	screenshot(t, ctx, "ui-selection")
	b64 := evalJS[string](t, ctx, `fetch(document.getElementById("sel-download").href).then(r => r.arrayBuffer()).then(b => { let s = ""; for (const x of new Uint8Array(b)) s += String.fromCharCode(x); return btoa(s); })`)
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	got := tarNames(t, raw)
	slices.Sort(got)
	if want := []string{"notes.txt=changed on the server\nand merged\n", "proj/", "proj/a.txt=A", "proj/sub/", "proj/sub/b.md=B"}; !slices.Equal(got, want) {
		t.Fatalf("selection archive holds %q, want %q", got, want)
	}
	step(t, ctx, "clear the selection", chromedp.Click(chromedp.ID("sel-clear")))

	// Copying a folder runs as a transfer; the page announces its end.
	click(t, ctx, "mark proj", rowJS("proj")+`.closest(".row").querySelector(".mark")`)
	step(t, ctx, "copy the selection", chromedp.Click(chromedp.ID("sel-copy")))
	waitJS(t, ctx, "the destination dialog", `document.getElementById("dlg").open`)
	setValue(t, ctx, "dlg-input", dir+"/backup")
	step(t, ctx, "copy", chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "the notice of the finished copy", `document.getElementById("notice").textContent.includes("finished")`)
	if b, err := os.ReadFile(filepath.Join(dir, "backup", "proj", "sub", "b.md")); err != nil || string(b) != "B" {
		t.Fatalf("copied folder: %q %v", b, err)
	}

	// Move a file into a folder.
	click(t, ctx, "select small.txt", rowJS("small.txt"))
	step(t, ctx, "move", chromedp.Click(chromedp.ID("act-move")))
	waitJS(t, ctx, "the destination dialog", `document.getElementById("dlg").open`)
	setValue(t, ctx, "dlg-input", dir+"/backup")
	step(t, ctx, "move it", chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "small.txt gone from the listing", rowJS("small.txt")+` === undefined && `+rowJS("notes.txt")+` !== undefined`)
	if b, err := os.ReadFile(filepath.Join(dir, "backup", "small.txt")); err != nil || string(b) != "s" {
		t.Fatalf("moved file: %q %v", b, err)
	}

	// Delete a selection of two, after one confirmation.
	click(t, ctx, "mark medium.txt", rowJS("medium.txt")+`.closest(".row").querySelector(".mark")`)
	click(t, ctx, "mark large.bin", rowJS("large.bin")+`.closest(".row").querySelector(".mark")`)
	step(t, ctx, "delete the selection", chromedp.Click(chromedp.ID("sel-delete")))
	waitJS(t, ctx, "the confirmation", `document.getElementById("dlg").open && document.getElementById("dlg-title").textContent === "Delete 2 entries?"`)
	step(t, ctx, "confirm", chromedp.Click(chromedp.ID("dlg-ok")))
	waitJS(t, ctx, "both gone", rowJS("medium.txt")+` === undefined && `+rowJS("large.bin")+` === undefined && `+rowJS("notes.txt")+` !== undefined`)
	for _, n := range []string{"medium.txt", "large.bin"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Fatalf("%s still on disk: %v", n, err)
		}
	}
	if !evalJS[bool](t, ctx, `document.getElementById("error").hidden`) {
		t.Fatalf("error shown: %s", evalJS[string](t, ctx, `document.getElementById("error-text").textContent`))
	}
	if n := e.dialogs.Load(); n != 0 {
		t.Fatalf("%d script dialogs opened: user content ran script", n)
	}
}
