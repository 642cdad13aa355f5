package files

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

func TestErrorMapping(t *testing.T) {
	e := newEnv(t)
	f := e.fs(Options{})
	ctx := context.Background()
	writeLocal(t, e.dir, map[string]string{"file": "data", "full/x": "x", "other/y": "y"})
	if err := os.Mkdir(filepath.Join(e.dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(e.dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	d := func(name string) string { return filepath.Join(e.dir, name) }
	// An FS whose home is a scratch directory, so that a broken home check removes only that.
	fh := e.fs(Options{Home: d("full")})
	up := func(p string, opts UploadOptions) error {
		_, err := f.Upload(ctx, p, strings.NewReader("new"), opts)
		return err
	}

	tests := []struct {
		name string
		do   func() error
		want error
		path string // must appear in the message
	}{
		{"stat missing", func() error { _, err := f.Stat(ctx, d("missing"), true); return err }, fs.ErrNotExist, d("missing")},
		{"stat in /root", func() error { _, err := f.Stat(ctx, "/root/secret", false); return err }, fs.ErrPermission, "/root/secret"},
		{"list /root", func() error { _, err := f.List(ctx, "/root", ListOptions{}); return err }, fs.ErrPermission, "/root"},
		{"list missing", func() error { _, err := f.List(ctx, d("missing"), ListOptions{}); return err }, fs.ErrNotExist, d("missing")},
		{"upload to /etc", func() error { return up("/etc/sshapi-x", UploadOptions{}) }, fs.ErrPermission, "/etc/sshapi-x"},
		{"upload to /root", func() error { return up("/root/sshapi-x", UploadOptions{}) }, fs.ErrPermission, "/root/sshapi-x"},
		{"upload parents in /root", func() error { return up("/root/a/b", UploadOptions{Parents: true}) }, fs.ErrPermission, "/root/a"},
		{"upload existing", func() error { return up(d("file"), UploadOptions{}) }, fs.ErrExist, d("file")},
		{"upload onto dir", func() error { return up(d("empty"), UploadOptions{Overwrite: true}) }, ErrIsDir, d("empty")},
		{"upload below a file", func() error { return up(d("file/x"), UploadOptions{}) }, ErrNotDir, d("file/x")},
		{"upload missing parent", func() error { return up(d("nope/x"), UploadOptions{}) }, fs.ErrNotExist, d("nope/x")},
		{"upload bad sha", func() error { return up(d("n"), UploadOptions{SHA256: "xyz"}) }, ErrInvalid, "xyz"},
		{"upload bad mode", func() error { return up(d("n"), UploadOptions{Mode: os.ModeDir | 0o755}) }, ErrInvalid, d("n")},
		{"mkdir existing", func() error { return f.Mkdir(ctx, d("empty"), false) }, fs.ErrExist, d("empty")},
		{"mkdir -p over file", func() error { return f.Mkdir(ctx, d("file"), true) }, fs.ErrExist, d("file")},
		{"mkdir missing parent", func() error { return f.Mkdir(ctx, d("nope/x"), false) }, fs.ErrNotExist, d("nope/x")},
		{"mkdir in /etc", func() error { return f.Mkdir(ctx, "/etc/sshapi-x", false) }, fs.ErrPermission, "/etc/sshapi-x"},
		{"remove non-empty", func() error { return f.Remove(ctx, d("full"), false) }, ErrNotEmpty, d("full")},
		{"remove missing", func() error { return f.Remove(ctx, d("missing"), false) }, fs.ErrNotExist, d("missing")},
		{"remove /etc/passwd", func() error { return f.Remove(ctx, "/etc/passwd", false) }, fs.ErrPermission, "/etc/passwd"},
		{"remove /", func() error { return f.Remove(ctx, "/", true) }, ErrInvalid, "/"},
		{"move onto existing", func() error { return f.Move(ctx, d("link"), d("file"), false) }, fs.ErrExist, d("file")},
		{"move missing", func() error { return f.Move(ctx, d("missing"), d("n"), true) }, fs.ErrNotExist, d("missing")},
		{"move dir onto non-empty dir", func() error { return f.Move(ctx, d("empty"), d("full"), true) }, ErrNotEmpty, d("full")},
		{"move file onto dir", func() error { return f.Move(ctx, d("file"), d("empty"), true) }, ErrIsDir, d("empty")},
		{"move dir onto file", func() error { return f.Move(ctx, d("other"), d("file"), true) }, ErrNotDir, d("file")},
		{"move to /etc", func() error { return f.Move(ctx, d("file"), "/etc/sshapi-x", false) }, fs.ErrPermission, "/etc/sshapi-x"},
		{"chmod bad mode", func() error { return f.Chmod(ctx, d("file"), os.ModeSymlink|0o644, false) }, ErrInvalid, d("file")},
		{"chmod /etc/passwd", func() error { return f.Chmod(ctx, "/etc/passwd", 0o777, false) }, fs.ErrPermission, "/etc/passwd"},
		{"symlink existing", func() error { return f.Symlink(ctx, "x", d("file")) }, fs.ErrExist, d("file")},
		{"head dir", func() error { _, err := f.Head(ctx, d("empty"), 10, 0); return err }, ErrIsDir, d("empty")},
		{"head bytes and lines", func() error { _, err := f.Head(ctx, d("file"), 1, 1); return err }, ErrInvalid, d("file")},
		{"tail missing", func() error { _, err := f.Tail(ctx, d("missing"), 0, 0); return err }, fs.ErrNotExist, d("missing")},
		{"head fifo", func() error { _, err := f.Head(ctx, d("fifo"), 0, 1); return err }, ErrInvalid, d("fifo")},
		{"open fifo", func() error { _, _, err := f.OpenRead(ctx, d("fifo")); return err }, ErrInvalid, d("fifo")},
		{"checksum fifo", func() error { _, err := f.Checksum(ctx, d("fifo"), "md5"); return err }, ErrInvalid, d("fifo")},
		{"copy fifo", func() error { return f.Copy(ctx, d("fifo"), d("n"), CopyOptions{}) }, ErrInvalid, d("fifo")},
		{"remove home", func() error { return fh.Remove(ctx, ".", true) }, ErrInvalid, d("full")},
		{"remove home by name", func() error { return fh.Remove(ctx, d("full")+"/", true) }, ErrInvalid, d("full")},
		{"move home away", func() error { return fh.Move(ctx, ".", d("gone"), false) }, ErrInvalid, d("full")},
		{"move onto root", func() error { return f.Move(ctx, d("empty"), "/", true) }, ErrInvalid, "/"},
		{"open dir", func() error { _, _, err := f.OpenRead(ctx, d("empty")); return err }, ErrIsDir, d("empty")},
		{"checksum algorithm", func() error { _, err := f.Checksum(ctx, d("file"), "crc32"); return err }, ErrInvalid, "crc32"},
		{"checksum dir", func() error { _, err := f.Checksum(ctx, d("empty"), "md5"); return err }, ErrIsDir, d("empty")},
		{"checksum missing", func() error { _, err := f.Checksum(ctx, d("missing"), "md5"); return err }, fs.ErrNotExist, d("missing")},
		{"checksum unreadable", func() error { _, err := f.Checksum(ctx, "/etc/shadow", "md5"); return err }, fs.ErrPermission, "/etc/shadow"},
		{"copy missing", func() error { return f.Copy(ctx, d("missing"), d("n"), CopyOptions{}) }, fs.ErrNotExist, d("missing")},
		{"copy dir without recursive", func() error { return f.Copy(ctx, d("full"), d("n"), CopyOptions{}) }, ErrIsDir, d("full")},
		{"copy onto existing", func() error { return f.Copy(ctx, d("file"), d("link"), CopyOptions{}) }, fs.ErrExist, d("link")},
		{"copy to /etc", func() error { return f.Copy(ctx, d("file"), "/etc/sshapi-x", CopyOptions{}) }, fs.ErrPermission, "/etc/sshapi-x"},
		{"chown to root", func() error { return f.Chown(ctx, d("file"), "root", "", false) }, fs.ErrPermission, d("file")},
		{"chown nothing", func() error { return f.Chown(ctx, d("file"), "", "", false) }, ErrInvalid, d("file")},
		{"compress format", func() error { return f.Compress(ctx, []string{d("file")}, d("a.zip"), "zip") }, ErrInvalid, "zip"},
		{"compress existing", func() error { return f.Compress(ctx, []string{d("file")}, d("link"), "tar") }, fs.ErrExist, d("link")},
		{"compress missing source", func() error { return f.Compress(ctx, []string{d("missing")}, d("a.tar"), "tar") }, fs.ErrNotExist, d("missing")},
		{"extract into file", func() error { return f.Extract(ctx, d("file"), d("file")) }, ErrNotDir, d("file")},
		{"extract garbage", func() error { return f.Extract(ctx, d("file"), d("empty")) }, ErrInvalid, d("empty")},
		{"archive format", func() error { return f.WriteArchive(ctx, d("full"), "rar", io.Discard) }, ErrInvalid, "rar"},
		{"empty path", func() error { _, err := f.Stat(ctx, "", true); return err }, ErrInvalid, "empty path"},
		{"NUL in path", func() error { _, err := f.Stat(ctx, "a\x00b", true); return err }, ErrInvalid, "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if err == nil {
				t.Fatalf("no error, want %v", tt.want)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %q does not wrap %q", err, tt.want)
			}
			var fe *Error
			if !errors.As(err, &fe) {
				t.Errorf("error %q is not an *Error", err)
			}
			if !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q does not mention %q", err, tt.path)
			}
		})
	}
	// Nothing was changed by the failed operations.
	want := []string{".", "empty", "fifo", "file", "full", "full/x", "link", "other", "other/y"}
	if got := localTree(t, e.dir); !equalStrings(got, want) {
		t.Errorf("tree after failures = %q, want %q", got, want)
	}
	if b, _ := os.ReadFile(d("file")); string(b) != "data" {
		t.Errorf("file changed to %q", b)
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

func TestConnectionLost(t *testing.T) {
	conn, err := ssh.Dial("tcp", testServer.Addr, testServer.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	c, err := sftp.NewClient(conn, sftp.UseConcurrentWrites(true))
	if err != nil {
		t.Fatal(err)
	}
	f := New(c, sessionRunner{conn}, Options{})
	ctx := context.Background()
	if _, err := f.Stat(ctx, "/", true); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	ops := []struct {
		name string
		do   func() error
	}{
		{"stat", func() error { _, err := f.Stat(ctx, "/etc", true); return err }},
		{"list", func() error { _, err := f.List(ctx, "/etc", ListOptions{}); return err }},
		{"upload", func() error {
			_, err := f.Upload(ctx, "/tmp/x", bytes.NewReader(make([]byte, 1<<20)), UploadOptions{})
			return err
		}},
		{"checksum via runner", func() error { _, err := f.Checksum(ctx, "/etc/hostname", "md5"); return err }},
	}
	for _, op := range ops {
		if err := op.do(); !errors.Is(err, ErrConnection) {
			t.Errorf("%s after close: %v, want ErrConnection", op.name, err)
		}
	}
}
