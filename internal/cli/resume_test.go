package cli

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutProxy is a TCP proxy in front of the service that cuts the connection carrying the n-th
// byte sent towards the service after cutAfter(n), in the middle of whatever request it
// carries; while down, every new connection is closed at once (the service unreachable).
type cutProxy struct {
	ln       net.Listener
	upstream string

	mu        sync.Mutex
	budget    int64 // bytes left before the cut; < 0: no cut armed
	thenDown  bool
	down      bool
	forwarded int64 // bytes sent towards the service, all connections
	cuts      int
	conns     []net.Conn
}

func startCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream, budget: -1}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

// cutAfter arms a cut after n more bytes towards the service; with thenDown the proxy is down
// from the cut on.
func (p *cutProxy) cutAfter(n int64, thenDown bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.budget, p.thenDown = n, thenDown
}

func (p *cutProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// stats returns the bytes forwarded towards the service and the cuts so far.
func (p *cutProxy) stats() (int64, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forwarded, p.cuts
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pump(c, s, true)
		go p.pump(s, c, false)
	}
}

// take returns how many of n bytes towards the service may pass and whether to cut after them.
func (p *cutProxy) take(n int64) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget < 0 {
		p.forwarded += n
		return n, false
	}
	k := min(n, p.budget)
	p.budget -= k
	p.forwarded += k
	if p.budget > 0 {
		return k, false
	}
	p.budget = -1
	p.cuts++
	p.down = p.down || p.thenDown
	return k, true
}

func (p *cutProxy) pump(src, dst net.Conn, towardsService bool) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			k, cut := int64(n), false
			if towardsService {
				k, cut = p.take(int64(n))
			}
			if _, werr := dst.Write(buf[:k]); werr != nil || cut {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestPutResumableCut: `sshapi put --resumable` through a proxy that cuts its connection to
// the real service midway. Each case checks the remote file byte for byte on the sshd's disk,
// that no more than the rest was sent again, and that the resume state is gone at the end.
func TestPutResumableCut(t *testing.T) {
	const MiB = 1 << 20
	e := startVerbEnv(t)
	p := startCutProxy(t, strings.TrimPrefix(e.url, "http://"))
	t.Setenv("SSHAPI_URL", p.url())
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	states := func() []string {
		m, _ := filepath.Glob(filepath.Join(cache, "sshapi", "uploads", "*.json"))
		return m
	}
	data := make([]byte, 12*MiB+7)
	_, _ = rand.Read(data)
	src := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// first run: cut after cut bytes (thenDown: the service stays unreachable), put's flags
		cut      int64
		thenDown bool
		flags    []string
		// firstFails: the first run gives up and leaves its state; the second run continues
		firstFails bool
		// maxSent bounds the bytes the run that finished sent (the first, or the second)
		maxSent int64
	}{
		{name: "put retries from the committed offset", cut: 6 * MiB, flags: []string{"--chunk-size", "4194304"}, maxSent: int64(len(data)) + 3*MiB},
		{name: "one PATCH, put retries from the committed offset", cut: 5 * MiB, maxSent: int64(len(data)) + 3*MiB},
		{name: "an interrupted put continues when run again", cut: 5 * MiB, thenDown: true, flags: []string{"--retries", "1", "--chunk-size", "2097152"},
			firstFails: true, maxSent: int64(len(data)) - 4*MiB + 64<<10},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := "hpc:" + e.remote + "/cut" + string(rune('a'+i)) + ".bin"
			args := append(append([]string{"put", "--resumable", "-q"}, tc.flags...), src, dst)
			before, cuts0 := p.stats()
			p.cutAfter(tc.cut, tc.thenDown)
			code, _, errOut := sshapi(t, args...)
			if _, cuts := p.stats(); cuts != cuts0+1 {
				t.Fatalf("the proxy cut %d times, want 1", cuts-cuts0)
			}
			sent0, _ := p.stats()
			if tc.firstFails {
				if code == 0 || !strings.Contains(errOut, "run the same command again") {
					t.Fatalf("first run: exit %d, stderr %q; want a failure that says how to continue", code, errOut)
				}
				if len(states()) != 1 {
					t.Fatalf("resume states after the interrupted run: %v", states())
				}
				if _, err := os.Stat(filepath.Join(e.remote, filepath.Base(dst))); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the destination exists before the last byte: %v", err)
				}
				p.setDown(false)
				args[2] = "--progress" // the note about continuing is not shown with -q
				code, _, errOut = sshapi(t, args...)
				if !strings.Contains(errOut, "continuing the upload an earlier run left") {
					t.Errorf("second run did not say it continues: %q", errOut)
				}
			}
			if code != 0 {
				t.Fatalf("put: exit %d: %s", code, errOut)
			}
			sent, _ := p.stats()
			if !tc.firstFails {
				sent0 = before // the first run finished
			}
			if sent-sent0 > tc.maxSent {
				t.Errorf("the run that finished sent %d bytes towards the service, want at most %d", sent-sent0, tc.maxSent)
			}
			got, err := os.ReadFile(filepath.Join(e.remote, filepath.Base(dst)))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("remote file: %v (%d bytes, want %d identical)", err, len(got), len(data))
			}
			if s := states(); len(s) != 0 {
				t.Errorf("resume state left after success: %v", s)
			}
		})
	}
}

// TestPutResumableStaleState: a state file naming an upload the service no longer has (expired,
// or finished by a run that died before it could remove the state) makes put start over, unless
// the destination already holds the file's bytes; either way the state is gone afterwards.
func TestPutResumableStaleState(t *testing.T) {
	e := startVerbEnv(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	data := []byte(strings.Repeat("stale state ", 1000))
	src := filepath.Join(t.TempDir(), "s.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(src)
	tests := []struct {
		name      string
		already   bool // the destination holds the bytes already
		wantNote  string
		wantMtime bool // the destination was not written again
	}{
		{name: "the upload is gone: put starts over", wantNote: "starting over"},
		{name: "the upload finished before: nothing is sent", already: true, wantMtime: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("s%d.bin", i)
			remotePath := filepath.Join(e.remote, name)
			old := time.Now().Add(-time.Hour).Truncate(time.Second)
			if tc.already {
				if err := os.WriteFile(remotePath, data, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(remotePath, old, old); err != nil {
					t.Fatal(err)
				}
			}
			file, err := uploadStateFile(e.url, "hpc", e.remote+"/"+name, fi.Size(), fi.ModTime())
			if err != nil {
				t.Fatal(err)
			}
			if err := writeUploadState(file, &uploadState{URL: "/v1/systems/hpc/uploads/nosuchupload", Created: time.Now()}); err != nil {
				t.Fatal(err)
			}
			code, _, errOut := sshapi(t, "put", "--resumable", "--progress", src, "hpc:"+e.remote+"/"+name)
			if code != 0 || !strings.Contains(errOut, tc.wantNote) {
				t.Fatalf("put: exit %d, want a note %q: %s", code, tc.wantNote, errOut)
			}
			if got, err := os.ReadFile(remotePath); err != nil || !bytes.Equal(got, data) {
				t.Errorf("remote file: %v", err)
			}
			if st, err := os.Stat(remotePath); err == nil && st.ModTime().Equal(old) != tc.wantMtime {
				t.Errorf("remote file modified at %s (before the run: %s); want it rewritten: %v", st.ModTime(), old, !tc.wantMtime)
			}
			if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state file after success: %v", err)
			}
		})
	}
}
