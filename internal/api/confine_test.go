package api

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"
)

// TestExtractHostileArchiveOverHTTP: an archive whose members leave the destination is refused
// with 400 before anything is written, through the real service.
func TestExtractHostileArchiveOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "dst"), 0o755); err != nil {
		t.Fatal(err)
	}
	arch := filepath.Join(root, "evil.tar")
	f, err := os.Create(arch)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	_ = tw.WriteHeader(&tar.Header{Name: "fine", Typeflag: tar.TypeReg, Mode: 0o644})
	_ = tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: dir})
	_ = tw.WriteHeader(&tar.Header{Name: "l/pwned", Typeflag: tar.TypeReg, Mode: 0o644})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	chownTree(t, dir, e.srv.User)
	if r := e.do("alice", "PATCH", "/v1/systems/hpc", map[string]any{"root_dir": root}); r.status != 200 {
		t.Fatal(string(r.body))
	}
	r := e.do("alice", "POST", "/v1/systems/hpc/ops/extract", map[string]any{"archive": arch, "destination": filepath.Join(root, "dst")})
	if r.status != 400 {
		t.Fatalf("extract: %d %s, want 400", r.status, r.body)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "dst")); len(entries) != 0 {
		t.Errorf("the destination got %d entries", len(entries))
	}
	if fileExists(filepath.Join(dir, "pwned")) {
		t.Error("a member was written outside the root")
	}
}
