package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// SFTP packet types the gate below looks at (draft-ietf-secsh-filexfer-02).
const (
	fxpOpen  = 3
	fxpLstat = 7
)

// pairGate is a relay between a pkg/sftp client and sftp-server that holds the server's replies
// to two kinds of request (want[0] and want[1], matched by packet type and path) until both have
// been sent: a client that waits for the one's reply before sending the other never gets it.
// It is how a test tells "sent together" from "one after the other" without timing anything:
// the first case passes, the second stalls until the gate gives up (failing the test) after
// giveUp.
type pairGate struct {
	t      *testing.T
	want   [2]func(typ byte, path string) bool
	giveUp time.Duration

	mu   sync.Mutex
	seen [2]bool
	held map[uint32]bool // ids of requests whose replies wait for the pair
	open chan struct{}   // closed once both were sent
	// perms, if not nil, gets the permissions each SSH_FXP_OPEN asked for, by path (none: absent).
	perms map[string]uint32
}

// SSH_FILEXFER_ATTR_PERMISSIONS: an attribute block's flag for the permissions field.
const attrPermissions = 0x4

// openPerms returns the permissions an SSH_FXP_OPEN's body (after its path) asks for.
func openPerms(rest []byte) (uint32, bool) {
	if len(rest) < 12 || binary.BigEndian.Uint32(rest[4:8])&attrPermissions == 0 {
		return 0, false // pflags, then attribute flags; size, uid and gid absent: perms next
	}
	return binary.BigEndian.Uint32(rest[8:12]), true
}

// request notes a packet the client sent.
func (g *pairGate) request(p []byte) {
	if len(p) < 9 {
		return
	}
	typ, id := p[0], binary.BigEndian.Uint32(p[1:5])
	var name string
	if n := binary.BigEndian.Uint32(p[5:9]); int(n) <= len(p)-9 {
		name = string(p[9 : 9+n])
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if typ == fxpOpen && g.perms != nil {
		if perm, ok := openPerms(p[9+len(name):]); ok {
			g.perms[name] = perm
		}
	}
	for i, w := range g.want {
		if w(typ, name) {
			g.seen[i] = true
			g.held[id] = true
		}
	}
	if g.seen[0] && g.seen[1] {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	}
}

// reply waits, for a reply to a held request, until both requests were sent.
func (g *pairGate) holds(p []byte) bool {
	if len(p) < 5 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[binary.BigEndian.Uint32(p[1:5])]
}

// wait returns once both requests of the pair were sent, or after giveUp (failing the test).
func (g *pairGate) wait() {
	select {
	case <-g.open:
	case <-time.After(g.giveUp):
		g.t.Errorf("the two requests were not in flight together: the server's reply was held %v for the other one", g.giveUp)
		g.mu.Lock()
		select {
		case <-g.open:
		default:
			close(g.open)
		}
		g.mu.Unlock()
	}
}

// relay copies SFTP packets from src to dst, showing each (type and body, without the length)
// to see first.
func relay(dst io.Writer, src io.Reader, see func([]byte)) error {
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return err
		}
		p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(src, p); err != nil {
			return err
		}
		see(p)
		if _, err := dst.Write(append(hdr[:], p...)); err != nil {
			return err
		}
	}
}

// relayReplies copies the server's replies from src to dst: a held one once the pair was sent
// (wait), in a goroutine of wg's, every other at once. SFTP replies may come in any order, and
// pkg/sftp matches them by id, so a reply the client needs before it can send the pair's second
// request (another request's, sent after the first of the pair) is never stuck behind a held
// one: only the pair's own replies are held.
func (g *pairGate) relayReplies(dst io.Writer, src io.Reader, wg *sync.WaitGroup) error {
	var mu sync.Mutex // one packet at a time on dst
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := dst.Write(b)
		return err
	}
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return err
		}
		p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(src, p); err != nil {
			return err
		}
		b := append(hdr[:], p...)
		if g.holds(p) {
			wg.Go(func() {
				g.wait()
				_ = write(b) // a client gone by then has failed the test already
			})
			continue
		}
		if err := write(b); err != nil {
			return err
		}
	}
}

// gatedSFTP is countedSFTP with g relaying between the client and sftp-server.
func gatedSFTP(t *testing.T, g *pairGate) (c *sftp.Client, requests func() []string) {
	t.Helper()
	g.held, g.open = map[uint32]bool{}, make(chan struct{})
	srv := startSFTPServer(t)
	toSrvR, toSrvW := io.Pipe()
	fromSrvR, fromSrvW := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = relay(srv.in, toSrvR, g.request)
		_ = srv.in.Close()
	})
	wg.Go(func() {
		err := g.relayReplies(fromSrvW, srv.out, &wg)
		_ = fromSrvW.CloseWithError(err)
	})
	c, err := sftp.NewClientPipe(fromSrvR, toSrvW)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv.requests(t, func() {
		_ = c.Close()
		_ = toSrvW.Close()
		_ = srv.cmd.Wait()
		_ = fromSrvR.Close()
		wg.Wait()
	})
}

// TestUploadStartPipelined: an upload's lstat of the destination and the exclusive create of its
// temporary file are in flight together (the relay holds either's reply until the other was
// sent), one round trip instead of two, and the refusals the lstat brings still hold, with the
// temporary file removed.
func TestUploadStartPipelined(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "exists"), []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		opts      UploadOptions
		wantErr   error
		wantMode  os.FileMode
		wantBytes string
	}{
		{"new", UploadOptions{}, nil, DefaultFileMode, "new content"},
		{"exists", UploadOptions{}, os.ErrExist, 0o640, "old"},
		{"exists, overwrite", UploadOptions{Overwrite: true}, nil, 0o640, "new content"},
		{"adir", UploadOptions{Overwrite: true}, ErrIsDir, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(dir, tt.name)
			if tt.name == "exists, overwrite" {
				dst = filepath.Join(dir, "exists")
			}
			g := &pairGate{t: t, giveUp: 5 * time.Second, want: [2]func(byte, string) bool{
				func(typ byte, p string) bool { return typ == fxpLstat && p == dst },
				func(typ byte, p string) bool { return typ == fxpOpen && IsTempName(filepath.Base(p)) },
			}}
			c, requests := gatedSFTP(t, g)
			f := New(c, noRunner{t}, Options{})
			_, err := f.Upload(t.Context(), dst, bytes.NewReader([]byte("new content")), tt.opts)
			if !matchErr(err, tt.wantErr) {
				t.Fatalf("upload: %v, want %v", err, tt.wantErr)
			}
			_ = requests()
			if tt.wantBytes != "" {
				got, err := os.ReadFile(dst)
				if err != nil || string(got) != tt.wantBytes {
					t.Fatalf("%s holds %q (%v), want %q", dst, got, err, tt.wantBytes)
				}
				fi, _ := os.Stat(dst)
				if fi.Mode().Perm() != tt.wantMode {
					t.Fatalf("mode %v, want %v", fi.Mode().Perm(), tt.wantMode)
				}
			}
			assertNoTemps(t, dir)
		})
	}
}

// matchErr reports whether err is want (nil: no error).
func matchErr(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return err != nil && errors.Is(err, want)
}

// assertNoTemps fails if dir holds a temporary name.
func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if IsTempName(de.Name()) {
			t.Fatalf("temporary file %s left behind", de.Name())
		}
	}
}

// TestUploadRequests: an upload to an absolute path on a fresh, unconfined FS (the first request
// of a new connection) asks the server for nothing but the upload's own requests — no realpath
// of the home directory — and the stripes Plan hands over are written to: each gets the
// temporary file opened for writing, once it exists and is owner-only. Counted by the
// sftp-servers' own logs.
func TestUploadRequests(t *testing.T) {
	if _, err := os.Stat(sftpServerPath); err != nil {
		t.Fatalf("sftp-server: %v", err)
	}
	dir := t.TempDir()
	data := make([]byte, 3<<20+17)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	c, requests := countedSFTP(t)
	stripe, stripeRequests := countedSFTP(t)
	planned := 0
	dst := filepath.Join(dir, "up.bin")
	opts := UploadOptions{Plan: func() (<-chan *sftp.Client, [][]byte) {
		planned++
		des, _ := os.ReadDir(dir)
		if len(des) != 1 || !IsTempName(des[0].Name()) {
			t.Errorf("Plan called with %v in the directory, want the temporary file alone", des)
		} else if fi, err := os.Stat(filepath.Join(dir, des[0].Name())); err != nil || fi.Mode().Perm() != tempMode {
			t.Errorf("Plan called with the temporary file %v (%v), want mode %v", fi, err, tempMode)
		}
		ch := make(chan *sftp.Client, 1)
		ch <- stripe
		close(ch)
		bufs := make([][]byte, 4)
		for i := range bufs {
			bufs[i] = make([]byte, 256<<10)
		}
		return ch, bufs
	}}
	f := New(c, noRunner{t}, Options{})
	if _, err := f.Upload(context.Background(), dst, bytes.NewReader(data), opts); err != nil {
		t.Fatal(err)
	}
	if planned != 1 {
		t.Fatalf("Plan called %d times, want 1", planned)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("uploaded file differs (%v)", err)
	}
	ops := requests()
	if slices.Contains(ops, "realpath") {
		t.Fatalf("the upload asked for a realpath: %v", ops)
	}
	sops := stripeRequests()
	if !slices.Contains(sops, "open") || !slices.Contains(sops, "write") {
		t.Fatalf("the stripe channel was asked for %v, want the temporary file opened and written", sops)
	}
}

// SFTP packet types of an upload's end (draft-ietf-secsh-filexfer-02).
const (
	fxpWrite    = 6
	fxpFsetstat = 10
)

// TestUploadEndPipelined: once an upload's data is written, the fsetstat that gives the file its
// final mode (by handle) and the close of the handle the data went through are in flight
// together (the relay holds either's reply until the other was sent), and the file still gets
// its mode, its content and its name only after both, with no temporary file left.
func TestUploadEndPipelined(t *testing.T) {
	tests := []struct {
		name string
		opts UploadOptions
		want os.FileMode
	}{
		{"default mode", UploadOptions{}, DefaultFileMode},
		{"given mode", UploadOptions{Mode: 0o640}, 0o640},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, "up.bin")
			wrote := false // the gate's matchers see every request in order, one at a time
			g := &pairGate{t: t, giveUp: 5 * time.Second, want: [2]func(byte, string) bool{
				func(typ byte, _ string) bool {
					wrote = wrote || typ == fxpWrite
					return wrote && typ == fxpFsetstat
				},
				func(typ byte, _ string) bool { return wrote && typ == fxpClose },
			}}
			c, requests := gatedSFTP(t, g)
			data := make([]byte, 1<<20+3)
			_, _ = rand.Read(data)
			f := New(c, noRunner{t}, Options{})
			if _, err := f.Upload(t.Context(), dst, bytes.NewReader(data), tt.opts); err != nil {
				t.Fatal(err)
			}
			_ = requests()
			got, err := os.ReadFile(dst)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("uploaded file differs (%v)", err)
			}
			if fi, _ := os.Stat(dst); fi.Mode().Perm() != tt.want {
				t.Fatalf("mode %v, want %v", fi.Mode().Perm(), tt.want)
			}
			assertNoTemps(t, dir)
		})
	}
}
