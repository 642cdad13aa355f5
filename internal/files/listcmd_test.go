package files

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/pkg/sftp"
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
			if n := finds.Load() - before; n == 0 || !tc.opts.Recursive && n != 1 {
				t.Fatalf("the listing ran %d find commands, want one (with stdbuf)", n)
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
	// A server with GNU find but no stdbuf (busybox with findutils): find runs without it.
	bin := filepath.Join(e.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"env", "find"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	var plainFinds atomic.Int64
	noStdbuf := New(e.sftp, pathRunner{findCounter{channelRunner{sessionRunner{e.conn}, &opened}, &plainFinds}, bin}, Options{StreamDirBytes: 0, ListCommand: true})
	got, err = noStdbuf.List(ctx, dir, ListOptions{})
	if err != nil || !reflect.DeepEqual(got, want) || plainFinds.Load() != 2 {
		t.Fatalf("without stdbuf: %v, equal %v, %d find commands (want the stdbuf one and a plain one)", err, reflect.DeepEqual(got, want), plainFinds.Load())
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

// parsed is a dirent kept for comparison.
type parsed struct {
	name, link string
	st         sftp.FileStat
}

// parseAll feeds out to a findParser in the given writes and returns what it parsed.
func parseAll(out []byte, writes ...int) ([]parsed, *findParser) {
	var got []parsed
	p := &findParser{fn: func(d *dirent) error {
		got = append(got, parsed{string(d.name), string(d.link), d.st})
		return nil
	}}
	for _, n := range writes {
		_, _ = p.Write(out[:n])
		out = out[n:]
	}
	_, _ = p.Write(out)
	return got, p
}

// TestFindParser: find's output, hostile names and every type included, parses to the same
// entries however it is split into writes (at every byte, byte by byte), and malformed output
// is an error, never an entry.
func TestFindParser(t *testing.T) {
	out := []byte("plain\x00f644\x0012\x001732345678.1234567890\x001000\x00100\x00\x00" +
		"new\nline \"q\" \\ 'x' \xff\xfe\x00f600\x000\x000.0000000000\x000\x000\x00\x00" +
		"-rf\x00d2775\x004096\x00-1.5000000000\x004294967295\x004294967295\x00\x00" +
		"link\x00l777\x007\x001732345678.0\x001\x002\x00../new\nline\x00" +
		"fifo\x00p640\x000\x001\x001\x001\x00\x00" +
		"door\x00D4755\x000\x001\x001\x001\x00\x00" +
		"big\x00f7777\x009223372036854775807\x001\x001\x001\x00\x00")
	want := []parsed{
		{"plain", "", sftp.FileStat{Size: 12, Mode: sIFREG | 0o644, Mtime: 1732345678, UID: 1000, GID: 100}},
		{"new\nline \"q\" \\ 'x' \xff\xfe", "", sftp.FileStat{Mode: sIFREG | 0o600}},
		{"-rf", "", sftp.FileStat{Size: 4096, Mode: sIFDIR | 0o2775, Mtime: 1<<32 - 1, UID: 1<<32 - 1, GID: 1<<32 - 1}},
		{"link", "../new\nline", sftp.FileStat{Size: 7, Mode: sIFLNK | 0o777, Mtime: 1732345678, UID: 1, GID: 2}},
		{"fifo", "", sftp.FileStat{Mode: sIFIFO | 0o640, Mtime: 1, UID: 1, GID: 1}},
		{"door", "", sftp.FileStat{Mode: 0o4755, Mtime: 1, UID: 1, GID: 1}},
		{"big", "", sftp.FileStat{Size: 1<<63 - 1, Mode: sIFREG | 0o7777, Mtime: 1, UID: 1, GID: 1}},
	}
	check := func(name string, got []parsed, p *findParser) {
		t.Helper()
		if p.err != nil || len(p.rest) != 0 || p.entries != len(want) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: err %v, %d bytes left, %d entries:\n got %+v\nwant %+v", name, p.err, len(p.rest), p.entries, got, want)
		}
	}
	got, p := parseAll(out)
	check("whole", got, p)
	for i := range out {
		got, p := parseAll(out, i)
		check(fmt.Sprintf("split at %d", i), got, p)
	}
	ones := make([]int, len(out))
	for i := range ones {
		ones[i] = 1
	}
	got, p = parseAll(out, ones...)
	check("byte by byte", got, p)

	entry := func(fields ...string) []byte { return []byte(strings.Join(fields, "\x00") + "\x00") }
	ok := entry("a", "f644", "1", "2.5", "3", "4", "")
	bad := []struct {
		name string
		out  []byte
	}{
		{"empty name", entry("", "f644", "1", "2", "3", "4", "")},
		{"slash in name", entry("a/b", "f644", "1", "2", "3", "4", "")},
		{"no mode", entry("a", "f", "1", "2", "3", "4", "")},
		{"mode not octal", entry("a", "f648", "1", "2", "3", "4", "")},
		{"mode too large", entry("a", "f17777", "1", "2", "3", "4", "")},
		{"size not a number", entry("a", "f644", "1k", "2", "3", "4", "")},
		{"empty size", entry("a", "f644", "", "2", "3", "4", "")},
		{"size overflows", entry("a", "f644", "9223372036854775808", "2", "3", "4", "")},
		{"mtime not a number", entry("a", "f644", "1", "x.5", "3", "4", "")},
		{"negative uid", entry("a", "f644", "1", "2", "-3", "4", "")},
		{"gid overflows", entry("a", "f644", "1", "2", "3", "4294967296", "")},
		{"name too long", entry(strings.Repeat("n", maxFindField+1), "f644", "1", "2", "3", "4", "")},
		{"no end in sight", bytes.Repeat([]byte("x"), maxFindEntry+1)},
	}
	for _, tc := range bad {
		got, p := parseAll(append(append([]byte{}, ok...), tc.out...), len(ok)+1)
		if p.err == nil || len(got) != 1 {
			t.Errorf("%s: err %v after %d entries, want an error after 1", tc.name, p.err, len(got))
		}
	}
	// Output cut inside an entry leaves it unparsed, for findDirents to report.
	if got, p := parseAll(append(append([]byte{}, ok...), ok[:5]...)); p.err != nil || len(got) != 1 || len(p.rest) != 5 {
		t.Errorf("cut output: %d entries, err %v, %d bytes held", len(got), p.err, len(p.rest))
	}
}

// pathRunner is findCounter running commands with PATH set to one directory.
type pathRunner struct {
	findCounter
	path string
}

// Run implements Runner.
func (r pathRunner) Run(ctx context.Context, command string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return r.findCounter.Run(ctx, "PATH="+r.path+" "+command, stdin, stdout, stderr)
}

// TestFindParserNamesOnly: findNamesFormat's output (name, type letter) parses to entries with
// their type and modeUnknown, however it is split into writes; a type field that is not one
// letter is an error.
func TestFindParserNamesOnly(t *testing.T) {
	out := []byte("plain\x00f\x00new\nline \xff\x00d\x00link\x00l\x00odd\x00D\x00")
	want := []parsed{
		{"plain", "", sftp.FileStat{Mode: modeUnknown | sIFREG}},
		{"new\nline \xff", "", sftp.FileStat{Mode: modeUnknown | sIFDIR}},
		{"link", "", sftp.FileStat{Mode: modeUnknown | sIFLNK}},
		{"odd", "", sftp.FileStat{Mode: modeUnknown}},
	}
	for split := range len(out) {
		var got []parsed
		p := &findParser{namesOnly: true, fn: func(d *dirent) error {
			got = append(got, parsed{string(d.name), string(d.link), d.st})
			return nil
		}}
		_, _ = p.Write(out[:split])
		_, _ = p.Write(out[split:])
		if p.err != nil || len(p.rest) != 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("split at %d: err %v, %d bytes left:\n got %+v\nwant %+v", split, p.err, len(p.rest), got, want)
		}
	}
	p := &findParser{namesOnly: true, fn: func(*dirent) error { return nil }}
	_, _ = p.Write([]byte("x\x00f644\x00"))
	if p.err == nil {
		t.Fatal("a full-format entry parsed as names only")
	}
}
