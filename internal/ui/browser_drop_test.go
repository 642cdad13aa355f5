package ui_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// TestBrowserDropFolder drops a folder tree and a file onto the file table as a file manager
// would: Chromium is handed the local paths with Input.dispatchDragEvent (dragEnter, dragOver,
// drop), so Chromium itself builds the drop's DataTransfer and the FileSystemDirectoryEntry
// objects the page walks (nothing of the FileSystem API is made up in page script). The tree
// holds files at two depths, an empty folder, and an empty folder inside a folder that holds
// nothing else; every file (with its bytes) and every folder must exist on the server after
// the upload.
func TestBrowserDropFolder(t *testing.T) {
	e, _ := newUIEnv(t, map[string]string{"dest/": ""})
	ctx := e.ctx
	local := t.TempDir()
	writeTree(t, local, map[string]string{
		"proj/a.txt":        "A",
		"proj/sub/b.txt":    "BB",
		"proj/empty/":       "",
		"proj/deep/deeper/": "",
		"loose.txt":         "loose",
	})
	dest := filepath.Join(e.dir, "dest")
	step(t, ctx, "open the destination", chromedp.Evaluate[chromedp.Void](`location.hash = `+jsString("#/hpc/"+strings.TrimPrefix(dest, "/"))))
	waitJS(t, ctx, "the empty listing", `document.getElementById("count").textContent === "0 entries" && !document.getElementById("app").getAttribute("aria-busy")`)

	xy := evalJS[[]float64](t, ctx, `(() => { const r = document.getElementById("drop").getBoundingClientRect(); return [r.x + r.width / 2, r.y + Math.min(r.height / 2, 100)] })()`)
	data := &input.DragData{Items: []*input.DragDataItem{}, Files: []string{filepath.Join(local, "proj"), filepath.Join(local, "loose.txt")}, DragOperationsMask: 1}
	for _, typ := range []input.DispatchDragEventType{input.DispatchDragEventTypeDragEnter, input.DispatchDragEventTypeDragOver, input.DispatchDragEventTypeDrop} {
		if _, err := chromedp.Call(ctx, input.DispatchDragEvent, input.DispatchDragEventParams{Type: typ, X: xy[0], Y: xy[1], Data: data}); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
	}
	// Three files and two empty folders.
	waitJS(t, ctx, "the upload to end", `document.getElementById("upload-status").textContent.startsWith("Uploaded ")`)
	if s := evalJS[string](t, ctx, `document.getElementById("upload-status").textContent`); s != "Uploaded 5 of 5." {
		t.Fatalf("upload status %q, want Uploaded 5 of 5.", s)
	}
	waitJS(t, ctx, "the folder listed", rowJS("proj")+` !== undefined && `+rowJS("loose.txt")+` !== undefined`)
	screenshot(t, ctx, "ui-drop-folder")

	for name, want := range map[string]string{"proj/a.txt": "A", "proj/sub/b.txt": "BB", "loose.txt": "loose"} {
		if b, err := os.ReadFile(filepath.Join(dest, name)); err != nil || string(b) != want {
			t.Errorf("%s on the server: %q, %v; want %q", name, b, err, want)
		}
	}
	for _, name := range []string{"proj/empty", "proj/deep", "proj/deep/deeper"} {
		if fi, err := os.Stat(filepath.Join(dest, name)); err != nil || !fi.IsDir() {
			t.Errorf("folder %s on the server: %v", name, err)
		}
	}
}
