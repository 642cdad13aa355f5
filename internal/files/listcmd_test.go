package files

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// findCounter is a real session runner that counts the find commands it runs.
type findCounter struct {
	channelRunner
	finds *atomic.Int64
}

// Run implements Runner.
func (r findCounter) Run(ctx context.Context, command string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if strings.Contains(command, "'find'") {
		r.finds.Add(1)
	}
	return r.channelRunner.Run(ctx, command, stdin, stdout, stderr)
}

// TestListCommandMatchesSFTP lists directories holding hostile names, symlinks (dangling, to
// directories, with hostile targets), a FIFO, a socket-free mix of modes and a subdirectory once
// with `find -printf` and once with SFTP READDIRs: every page must be the same, entry by entry,
// the find path must really run find, and no payload may run.
func TestListCommandMatchesSFTP(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	token := filepath.Base(e.dir)
	dir := filepath.Join(e.dir, "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	local := map[string]string{"sub/x": "x", ".hidden": "h"}
	for _, n := range hostileNames(token) {
		local[n] = "data of " + n
	}
	writeLocal(t, dir, local)
	for target, link := range map[string]string{"sub": "to-dir", "missing target": "dangling", "new\nline": "nl-link", "$(touch pwned-" + token + "-dollar)": "payload-link"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "with space"), 0o4751); err != nil {
		t.Fatal(err)
	}
	var finds, opened atomic.Int64
	sftpOnly := New(e.sftp, channelRunner{sessionRunner{e.conn}, &opened}, Options{StreamDirBytes: 0})
	byFind := New(e.sftp, findCounter{channelRunner{sessionRunner{e.conn}, &opened}, &finds}, Options{StreamDirBytes: 0, ListCommand: true})
	tests := []struct {
		name string
		opts ListOptions
	}{
		{"all", ListOptions{}},
		{"hidden", ListOptions{ShowHidden: true}},
		{"page", ListOptions{Limit: 3, Offset: 2}},
		{"after", ListOptions{Limit: 4, After: "new"}},
		{"pattern", ListOptions{Pattern: "*link*"}},
		{"recursive", ListOptions{Recursive: true, ShowHidden: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := sftpOnly.List(ctx, dir, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			before := finds.Load()
			got, err := byFind.List(ctx, dir, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if finds.Load() == before {
				t.Fatal("the listing did not run find")
			}
			if !reflect.DeepEqual(got, want) {
				for i := range min(len(got.Entries), len(want.Entries)) {
					if !reflect.DeepEqual(got.Entries[i], want.Entries[i]) {
						t.Errorf("entry %d:\nfind %+v\nsftp %+v", i, got.Entries[i], want.Entries[i])
					}
				}
				t.Fatalf("find listing differs: %d entries (total %d), sftp %d (total %d)", len(got.Entries), got.Total, len(want.Entries), want.Total)
			}
		})
	}
	for _, m := range pwnedMarkers(token) {
		if _, err := os.Lstat(filepath.Join(e.dir, m)); err == nil {
			t.Fatalf("payload ran: %s exists", m)
		}
	}
	// A server without find: the listing falls back to SFTP and is the same.
	noFind := New(e.sftp, noFindRunner{channelRunner{sessionRunner{e.conn}, &opened}}, Options{StreamDirBytes: 0, ListCommand: true})
	want, err := sftpOnly.List(ctx, dir, ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := noFind.List(ctx, dir, ListOptions{})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("without find: %v, equal %v", err, reflect.DeepEqual(got, want))
	}
	// Errors are those of SFTP: a missing directory and a file.
	if _, err := byFind.List(ctx, filepath.Join(dir, "nope"), ListOptions{}); !isKind(err, os.ErrNotExist) {
		t.Fatalf("missing directory: %v", err)
	}
	if _, err := byFind.List(ctx, filepath.Join(dir, "sub", "x"), ListOptions{}); !isKind(err, ErrNotDir) {
		t.Fatalf("a file: %v", err)
	}
}

// noFindRunner runs commands with an empty PATH, as on a server without find.
type noFindRunner struct{ channelRunner }

// Run implements Runner.
func (r noFindRunner) Run(ctx context.Context, command string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return r.channelRunner.Run(ctx, "PATH=/nonexistent "+command, stdin, stdout, stderr)
}
