package files

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestHeadTail(t *testing.T) {
	e := newEnv(t)
	f := New(e.sftp, noRunner{t}, Options{})
	ctx := context.Background()
	var many strings.Builder
	for i := range 20000 { // 20000 numbered lines, ~190 KiB: several read chunks
		fmt.Fprintf(&many, "line %d\n", i)
	}
	huge := strings.Repeat("0123456789abcdef", (MaxExcerpt+100)/16) // 1 MiB + change, no newline
	writeLocal(t, e.dir, map[string]string{
		"lines": "a\nb\nc\nd\n", "nonl": "a\nb\nc", "empty": "", "many": many.String(), "huge": huge, "onlynl": "\n\n\n",
	})
	lastLines := func(n int) string {
		var b strings.Builder
		for i := 20000 - n; i < 20000; i++ {
			fmt.Fprintf(&b, "line %d\n", i)
		}
		return b.String()
	}

	tests := []struct {
		name      string
		tail      bool
		file      string
		n, lines  int
		want      string
		truncated bool
	}{
		{"head lines", false, "lines", 0, 2, "a\nb\n", false},
		{"head default", false, "many", 0, 0, many.String()[:len("line 0\n")*10], false},
		{"head bytes", false, "lines", 3, 0, "a\nb", false},
		{"head more lines than file", false, "nonl", 0, 10, "a\nb\nc", false},
		{"head empty", false, "empty", 0, 3, "", false},
		{"head capped bytes", false, "huge", MaxExcerpt + 50, 0, huge[:MaxExcerpt], true},
		{"head capped lines", false, "huge", 0, 5, huge[:MaxExcerpt], true},
		{"tail lines", true, "lines", 0, 2, "c\nd\n", false},
		{"tail lines no final newline", true, "nonl", 0, 2, "b\nc", false},
		{"tail all lines", true, "lines", 0, 10, "a\nb\nc\nd\n", false},
		{"tail across chunks", true, "many", 0, 9000, lastLines(9000), false},
		{"tail default", true, "many", 0, 0, lastLines(10), false},
		{"tail bytes", true, "lines", 3, 0, "\nd\n", false},
		{"tail bytes more than file", true, "nonl", 100, 0, "a\nb\nc", false},
		{"tail newlines only", true, "onlynl", 0, 2, "\n\n", false},
		{"tail empty", true, "empty", 0, 2, "", false},
		{"tail capped bytes", true, "huge", MaxExcerpt + 50, 0, huge[len(huge)-MaxExcerpt:], true},
		{"tail capped lines", true, "huge", 0, 1, huge[len(huge)-MaxExcerpt:], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			do := f.Head
			if tt.tail {
				do = f.Tail
			}
			x, err := do(ctx, filepath.Join(e.dir, tt.file), tt.n, tt.lines)
			if err != nil {
				t.Fatal(err)
			}
			if string(x.Data) != tt.want || x.Truncated != tt.truncated {
				t.Errorf("got %d bytes %q (truncated %v), want %d bytes %q (truncated %v)",
					len(x.Data), clip(x.Data), x.Truncated, len(tt.want), clip([]byte(tt.want)), tt.truncated)
			}
		})
	}
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:20]) + "..." + string(b[len(b)-20:])
	}
	return string(b)
}

func TestWriteArchive(t *testing.T) {
	e := newEnv(t)
	f := New(e.sftp, noRunner{t}, Options{})
	ctx := context.Background()
	big := bytes.Repeat([]byte("big file data "), 300_000) // ~4 MiB: pipelined reads
	files := map[string]string{"tree/a.txt": "alpha", "tree/sub/b.txt": "beta", "tree/big": string(big), "tree/empty": ""}
	writeLocal(t, e.dir, files)
	if err := os.Symlink("a.txt", filepath.Join(e.dir, "tree", "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(e.dir, "tree", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"tree/": "", "tree/a.txt": "alpha", "tree/big": string(big), "tree/empty": "", "tree/link": "-> a.txt",
		"tree/sub/": "", "tree/sub/b.txt": "beta",
	}
	wantOrder := []string{"tree/", "tree/a.txt", "tree/big", "tree/empty", "tree/link", "tree/sub/", "tree/sub/b.txt"}

	for _, format := range []string{"tar", "tar.gz", "zip"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := f.WriteArchive(ctx, filepath.Join(e.dir, "tree"), format, &buf); err != nil {
				t.Fatal(err)
			}
			got, order := readArchive(t, format, buf.Bytes())
			if !slices.Equal(order, wantOrder) {
				t.Errorf("entries %q, want %q", order, wantOrder)
			}
			for name, content := range want {
				if got[name] != content {
					t.Errorf("%s: %d bytes %q, want %d bytes", name, len(got[name]), clip([]byte(got[name])), len(content))
				}
			}
		})
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.WriteArchive(ctx2, filepath.Join(e.dir, "tree"), "tar", io.Discard); !isKind(err, context.Canceled) {
		t.Errorf("cancelled archive: %v", err)
	}
}

// readArchive returns name -> content ("-> target" for links) and the entry order.
func readArchive(t *testing.T, format string, data []byte) (map[string]string, []string) {
	t.Helper()
	got := map[string]string{}
	var order []string
	if format == "zip" {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		for _, zf := range zr.File {
			rc, err := zf.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if zf.Mode()&os.ModeSymlink != 0 {
				b = append([]byte("-> "), b...)
			}
			got[zf.Name] = string(b)
			order = append(order, zf.Name)
		}
		return got, order
	}
	var r io.Reader = bytes.NewReader(data)
	if format == "tar.gz" {
		gz, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeSymlink {
			b = []byte("-> " + h.Linkname)
		}
		got[h.Name] = string(b)
		order = append(order, h.Name)
	}
	return got, order
}

func TestTreeOperations(t *testing.T) {
	e := newEnv(t)
	f := e.fs(Options{})
	ctx := context.Background()
	writeLocal(t, e.dir, map[string]string{"src/a": "a", "src/d/b": "b", "src/d/e/c": "c", "target": "t"})
	if err := os.Symlink("../target", filepath.Join(e.dir, "src", "link")); err != nil {
		t.Fatal(err)
	}
	d := func(p string) string { return filepath.Join(e.dir, p) }
	mode := func(p string) os.FileMode {
		fi, err := os.Lstat(d(p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}

	// copy: links copied as links by default, dereferenced on request; data never via sshapi
	if err := f.Copy(ctx, d("src"), d("copy"), CopyOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if got := localTree(t, d("copy")); !slices.Equal(got, []string{".", "a", "d", "d/b", "d/e", "d/e/c", "link"}) {
		t.Errorf("copied tree %q", got)
	}
	if mode("copy/link")&os.ModeSymlink == 0 {
		t.Error("copy followed a symlink without Dereference")
	}
	if err := f.Copy(ctx, d("src/link"), d("deref"), CopyOptions{Dereference: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(d("deref")); mode("deref")&os.ModeSymlink != 0 || string(b) != "t" {
		t.Errorf("dereferenced copy: mode %v content %q", mode("deref"), b)
	}
	if err := f.Copy(ctx, d("src/a"), d("target"), CopyOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(d("target")); string(b) != "a" {
		t.Errorf("overwritten copy = %q", b)
	}

	// chmod -R: files and dirs, not the symlink's target
	if err := os.Chmod(d("target"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := f.Chmod(ctx, d("copy"), 0o700, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"copy", "copy/a", "copy/d", "copy/d/e/c"} {
		if m := mode(p).Perm(); m != 0o700 {
			t.Errorf("%s mode %v after chmod -R", p, m)
		}
	}
	if m := mode("target").Perm(); m != 0o640 {
		t.Errorf("chmod -R followed a symlink: target mode %v", m)
	}
	// a mode that removes the owner's read/execute is applied after descending
	if err := f.Chmod(ctx, d("copy/d"), 0o200, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"copy/d", "copy/d/b", "copy/d/e", "copy/d/e/c"} {
		if m := mode(p).Perm(); m != 0o200 {
			t.Errorf("%s mode %v after chmod -R 200", p, m)
		}
	}
	if err := f.Chmod(ctx, d("copy/d"), 0o755, true); err != nil {
		t.Fatal(err)
	}

	// remove -R over SFTP, leaving the link's target alone
	if err := f.Remove(ctx, d("copy"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d("copy")); !os.IsNotExist(err) {
		t.Errorf("copy still exists: %v", err)
	}
	if _, err := os.Stat(d("target")); err != nil {
		t.Errorf("recursive remove touched a link target: %v", err)
	}

	// move with and without overwrite
	if err := f.Move(ctx, d("deref"), d("moved"), false); err != nil {
		t.Fatal(err)
	}
	if err := f.Move(ctx, d("moved"), d("target"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(d("target")); string(b) != "t" {
		t.Errorf("moved over target = %q", b)
	}

	// checksums against Go's
	content := []byte("checksum me\n")
	writeLocal(t, e.dir, map[string]string{"sum": string(content)})
	sums := map[string]string{}
	s1, s5, s256, s512 := sha1.Sum(content), md5.Sum(content), sha256.Sum256(content), sha512.Sum512(content)
	sums["sha1"], sums["md5"], sums["sha256"], sums["SHA512"] = hex.EncodeToString(s1[:]), hex.EncodeToString(s5[:]),
		hex.EncodeToString(s256[:]), hex.EncodeToString(s512[:])
	for algo, want := range sums {
		if got, err := f.Checksum(ctx, d("sum"), algo); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %s", algo, got, err, want)
		}
	}

	// every compress format round-trips through extract
	for _, format := range []string{"tar", "tar.gz", "tar.bz2", "tar.xz"} {
		arch := d("arch." + format)
		if err := f.Compress(ctx, []string{d("src"), d("sum")}, arch, format); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		out := d("out-" + format)
		if err := f.Mkdir(ctx, out, false); err != nil {
			t.Fatal(err)
		}
		if err := f.Extract(ctx, arch, out); err != nil {
			t.Fatalf("extract %s: %v", format, err)
		}
		if got := localTree(t, out); !slices.Equal(got, []string{".", "src", "src/a", "src/d", "src/d/b", "src/d/e", "src/d/e/c", "src/link", "sum"}) {
			t.Errorf("%s extracted %q", format, got)
		}
		if ft, err := f.FileType(ctx, arch); err != nil || ft == "" {
			t.Errorf("file type of %s: %q, %v", format, ft, err)
		}
	}

	// an archive written inside its own source neither contains itself nor trips tar
	if err := f.Compress(ctx, []string{d("src")}, d("src/self.tar.gz"), "tar.gz"); err != nil {
		t.Fatal(err)
	}
	if err := f.Mkdir(ctx, d("self"), false); err != nil {
		t.Fatal(err)
	}
	if err := f.Extract(ctx, d("src/self.tar.gz"), d("self")); err != nil {
		t.Fatal(err)
	}
	if got := localTree(t, d("self")); !slices.Equal(got, []string{".", "src", "src/a", "src/d", "src/d/b", "src/d/e", "src/d/e/c", "src/link"}) {
		t.Errorf("self-archive extracted %q", got)
	}

	du, err := f.DiskUsage(ctx, e.dir)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.dir, &st); err != nil {
		t.Fatal(err)
	}
	if du.TotalBytes != st.Blocks*uint64(st.Frsize) || du.TotalInodes != st.Files || du.AvailableBytes == 0 || du.AvailableBytes > du.TotalBytes {
		t.Errorf("disk usage %+v vs statfs blocks %d frsize %d files %d", du, st.Blocks, st.Frsize, st.Files)
	}
}

// TestPlainOperationsRunNoProcess drives every SFTP-only operation with a Runner that fails the
// test when called.
func TestPlainOperationsRunNoProcess(t *testing.T) {
	e := newEnv(t)
	f := New(e.sftp, noRunner{t}, Options{})
	ctx := context.Background()
	d := func(p string) string { return filepath.Join(e.dir, p) }
	steps := []struct {
		name string
		do   func() error
	}{
		{"upload", func() error {
			_, err := f.Upload(ctx, d("x/f"), strings.NewReader("data\n"), UploadOptions{Parents: true})
			return err
		}},
		{"mkdir", func() error { return f.Mkdir(ctx, d("x/y/z"), true) }},
		{"list", func() error { _, err := f.List(ctx, d("x"), ListOptions{Recursive: true}); return err }},
		{"stat", func() error { _, err := f.Stat(ctx, d("x/f"), true); return err }},
		{"read", func() error { r, _, err := f.OpenRead(ctx, d("x/f")); r.Close(); return err }},
		{"head", func() error { _, err := f.Head(ctx, d("x/f"), 0, 1); return err }},
		{"tail", func() error { _, err := f.Tail(ctx, d("x/f"), 2, 0); return err }},
		{"symlink", func() error { return f.Symlink(ctx, "f", d("x/l")) }},
		{"chmod", func() error { return f.Chmod(ctx, d("x"), 0o750, true) }},
		{"move", func() error { return f.Move(ctx, d("x/f"), d("x/g"), false) }},
		{"df", func() error { _, err := f.DiskUsage(ctx, d("x")); return err }},
		{"archive", func() error { return f.WriteArchive(ctx, d("x"), "zip", io.Discard) }},
		{"remove", func() error { return f.Remove(ctx, d("x"), true) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
}
