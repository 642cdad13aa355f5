package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// sftpServerPath is Debian's OpenSSH sftp-server, the one the test sshd runs.
const sftpServerPath = "/usr/lib/openssh/sftp-server"

// countedSFTP starts OpenSSH's sftp-server as a child with every request logged (-l DEBUG3 on
// stderr) and a pkg/sftp client on its pipes. requests closes the client, waits for the server
// to exit and returns the operations it was asked for, in order, as the server logged them.
func countedSFTP(t *testing.T) (c *sftp.Client, requests func() []string) {
	t.Helper()
	srv := startSFTPServer(t)
	c, err := sftp.NewClientPipe(srv.out, srv.in)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv.requests(t, func() {
		_ = c.Close()
		_ = srv.cmd.Wait() // stderr is copied whole before Wait returns
	})
}

// sftpServer is OpenSSH's sftp-server running as a child, logging every request it is asked for
// (-l DEBUG3) on stderr.
type sftpServer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.Reader
	log *bytes.Buffer
}

// startSFTPServer starts sftpServerPath with every request logged.
func startSFTPServer(t *testing.T) *sftpServer {
	t.Helper()
	if _, err := os.Stat(sftpServerPath); err != nil {
		t.Fatalf("sftp-server: %v", err)
	}
	srv := &sftpServer{cmd: exec.Command(sftpServerPath, "-e", "-l", "DEBUG3"), log: &bytes.Buffer{}}
	srv.cmd.Stderr = srv.log
	var err error
	if srv.in, err = srv.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if srv.out, err = srv.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// requests registers stop (which ends the client and waits for the server) as a cleanup and
// returns a function that stops, once, and lists the operations the server logged, in order.
func (srv *sftpServer) requests(t *testing.T, stop func()) func() []string {
	var once sync.Once
	t.Cleanup(func() { once.Do(stop) })
	re := regexp.MustCompile(`request \d+: (\w+)`)
	return func() []string {
		once.Do(stop)
		var ops []string
		for _, m := range re.FindAllStringSubmatch(srv.log.String(), -1) {
			if m[1] != "sent" && m[1] != "limits" {
				ops = append(ops, m[1])
			}
		}
		return ops
	}
}

// noChannels is noRunner that can also open channels, as the pool's runner can (so a listing
// takes the path it takes in the API), failing the test if one is opened.
type noChannels struct{ noRunner }

// OpenSubsystem implements Channels.
func (n noChannels) OpenSubsystem(_ context.Context, name string) (io.ReadWriteCloser, error) {
	n.t.Errorf("unexpected channel for subsystem %s", name)
	return nil, errors.New("no channels allowed")
}

// TestSmallListRequests: a listing of a 10-entry directory, as the API makes it (kept listings
// on, StreamDirBytes as configured), asks the SFTP server for one stat of the directory and the
// read itself (opendir, readdir until the end, close) — the stat that dates the directory for
// kept listings is the one that tells a small directory from a large one, sent while the read
// is under way, not a round trip of its own before it. Counted by the sftp-server's own log.
func TestSmallListRequests(t *testing.T) {
	if _, err := os.Stat(sftpServerPath); err != nil {
		t.Fatalf("sftp-server: %v", err)
	}
	dir := t.TempDir()
	var want []string
	for i := range 10 {
		name := fmt.Sprintf("f%02d", i)
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	snaps := NewSnapshots(SnapshotConfig{Bytes: 64 << 20, PerOwnerBytes: 32 << 20, TTL: time.Hour})
	tests := []struct {
		name string
		opts ListOptions
	}{
		{"kept listings on", ListOptions{Limit: 200, Snapshots: snaps, SnapshotID: "sys\x00user", SnapshotOwner: "alice"}},
		{"kept listings off", ListOptions{Limit: 200}},
		{"sorted by size", ListOptions{Limit: 200, Sort: SortSize, Snapshots: snaps, SnapshotID: "sys\x00user", SnapshotOwner: "alice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, requests := countedSFTP(t)
			f := New(c, noChannels{noRunner{t}}, Options{Home: dir, StreamDirBytes: 64 << 10, ListCommand: true})
			for round := range 2 { // the second listing of the same directory costs the same
				l, err := f.List(t.Context(), dir, tt.opts)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, e := range l.Entries {
					got = append(got, e.Name)
					if e.Mode != "0644" || e.Size != 3 {
						t.Fatalf("round %d: entry %+v: want mode 0644 and size 3", round, e)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d: listed %v, want %v", round, got, want)
				}
			}
			ops := requests()
			slices.Sort(ops)
			wantOps := []string{"close", "close", "opendir", "opendir", "readdir", "readdir", "readdir", "readdir", "stat", "stat"}
			if !slices.Equal(ops, wantOps) {
				t.Fatalf("two listings asked the server for %v, want %v", ops, wantOps)
			}
		})
	}
}

// TestLargeListAttrs: a name-ordered listing of a large directory (read by `find -printf`)
// lstats only the entries of its page when the page is small, and none when it asks for more
// entries than namesOnlyMaxWindow: those come with their attributes from find itself, not from
// one lstat each (a 3,000-entry listing made 3,000 SFTP requests before). Counted by the
// sftp-server's own log.
func TestLargeListAttrs(t *testing.T) {
	if _, err := os.Stat(sftpServerPath); err != nil {
		t.Fatalf("sftp-server: %v", err)
	}
	e := newEnv(t)
	dir := filepath.Join(e.dir, "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), []byte{byte(i)}, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name       string
		limit      int
		wantLstats int
	}{
		{"a page of 200", 200, 200},
		{"everything", 0, 0},
		{"a page larger than the window", namesOnlyMaxWindow + 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, requests := countedSFTP(t)
			var opened, finds atomic.Int64
			f := New(c, findCounter{channelRunner{sessionRunner{e.conn}, &opened}, &finds}, Options{StreamDirBytes: 4 << 10, ListCommand: true})
			l, err := f.List(t.Context(), dir, ListOptions{Limit: tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			want := min(n, tt.limit)
			if tt.limit == 0 {
				want = n
			}
			if len(l.Entries) != want || l.Entries[0].Name != "f0000" || l.Entries[0].Size != 1 || l.Entries[0].Mode != "0640" {
				t.Fatalf("%d entries, first %+v", len(l.Entries), l.Entries[0])
			}
			if finds.Load() != 1 {
				t.Fatalf("%d find commands, want 1", finds.Load())
			}
			lstats := 0
			for _, op := range requests() {
				if op == "lstat" {
					lstats++
				}
			}
			if lstats != tt.wantLstats {
				t.Fatalf("%d lstat requests, want %d", lstats, tt.wantLstats)
			}
		})
	}
}
