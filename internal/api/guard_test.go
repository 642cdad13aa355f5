package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/transfer"
)

// The attacks of issue 18, each made through the API by bob, who holds a write grant on alice's
// share/ and nothing else: he swaps a directory that an operation on the shared tree is walking
// for a symlink (one alice made, pointing out of the grant) while the walk runs, at several
// moments. Whatever the timing, nothing outside the grant may be read, changed or removed.

// secretMark and victimMark are in every file outside the grant.
const (
	secretMark = "ALICE-SECRET-3b9f"
	victimMark = "ALICE-VICTIM-77a1"
)

type raceFixture struct {
	e      *env
	srv    *sshtest.Server
	root   string // alice's files: secret.txt, victim/, share/ (the grant)
	share  string
	victim string
	own    string // a directory on bob's own system, for transfers
}

// newRaceFixture builds alice's system with bob's write grant on share/, the guard waiting at
// most 300 ms (so that a swap refused by it is answered quickly).
func newRaceFixture(t *testing.T) *raceFixture {
	t.Helper()
	return newRaceFixtureGuard(t, nil)
}

// newRaceFixtureGuard is newRaceFixture with the API's guard g (nil: a single instance's).
func newRaceFixtureGuard(t *testing.T, g *guard.Guard) *raceFixture {
	t.Helper()
	var eng *transfer.Engine
	engine := withTransferEngine(t, transfer.Config{PollInterval: 50 * time.Millisecond, RetryBase: 100 * time.Millisecond}, &eng)
	e := newEnvWith(t, func(dir string, d *Deps, s **Server) {
		d.Access = access.New(access.Config{Guard: guard.Config{Wait: 300 * time.Millisecond}},
			access.Deps{Store: d.Store, Keyring: d.Keyring, Log: d.Log, Guard: g})
		d.Access.Start(t.Context())
		t.Cleanup(d.Access.Stop)
		engine(dir, d, s)
	})
	e.register("alice", "hpc")
	e.register("bob", "own")
	f := &raceFixture{e: e, srv: e.srv, root: e.srv.MkTemp(t), own: e.srv.MkTemp(t)}
	f.share, f.victim = filepath.Join(f.root, "share"), filepath.Join(f.root, "victim")
	mustMkdir(t, f.share, f.victim, filepath.Join(f.share, "stage"))
	mustWrite(t, filepath.Join(f.root, "secret.txt"), secretMark)
	for i := range 20 {
		mustWrite(t, filepath.Join(f.victim, fmt.Sprintf("v%02d", i)), victimMark)
	}
	// alice's own links out of the grant, inside it: the swaps move them into walked places.
	f.ownerLink(t, f.root, filepath.Join(f.share, "stage", "up"))
	f.ownerLink(t, f.victim, filepath.Join(f.share, "stage", "victim"))
	ownTree(t, e.srv, f.root)
	ownTree(t, e.srv, f.own)
	if r := e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "user:bob", "path": f.share, "access": "write"}); r.status != 201 {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	return f
}

func mustMkdir(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *raceFixture) ownerLink(t *testing.T, target, link string) {
	t.Helper()
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// sysPath is the URL form of a path on alice's system as bob addresses it.
func (f *raceFixture) url(route, p string) string {
	return "/v1/systems/alice:hpc/" + route + "/" + strings.TrimPrefix(p, "/")
}

// swap is bob's attack: dir is moved away and alice's link stage/<link> put in its place. It
// returns the statuses of the two moves.
func (f *raceFixture) swap(dir, link string) [2]int {
	a := f.e.do("bob", "POST", "/v1/systems/alice:hpc/ops/move", map[string]any{"source": dir, "destination": dir + fmt.Sprintf(".gone%d", time.Now().UnixNano())})
	b := f.e.do("bob", "POST", "/v1/systems/alice:hpc/ops/move", map[string]any{"source": filepath.Join(f.share, "stage", link), "destination": dir})
	for _, r := range []resp{a, b} {
		// 404 and 409: the first move was refused, so the second finds its source gone or its
		// destination still there.
		if r.status != 200 && r.status != 503 && r.status != 404 && r.status != 409 {
			f.e.t.Errorf("swap move: %d %s", r.status, r.body)
		}
		if r.status == 503 && r.header.Get("Retry-After") == "" {
			f.e.t.Errorf("503 without Retry-After: %s", r.body)
		}
	}
	return [2]int{a.status, b.status}
}

// intact fails unless every file outside the grant is as alice left it: present, same content,
// same mode.
func (f *raceFixture) intact(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, "secret.txt"))
	if err != nil || string(b) != secretMark {
		t.Fatalf("secret.txt changed: %q %v", b, err)
	}
	ents, err := os.ReadDir(f.victim)
	if err != nil || len(ents) != 20 {
		t.Fatalf("victim/ has %d entries (%v), want 20", len(ents), err)
	}
	for _, de := range ents {
		fi, _ := de.Info()
		if fi.Mode().Perm() != 0o644 {
			t.Fatalf("victim/%s mode %v, want 0644", de.Name(), fi.Mode())
		}
	}
}

// tree makes share/<name> with count files spread over dirs subdirectories named d0..dN, each
// with the same content, and gives it to the sshd user.
func (f *raceFixture) tree(t *testing.T, name string, dirs, count int, content string) string {
	t.Helper()
	top := filepath.Join(f.share, name)
	for i := range count {
		d := filepath.Join(top, fmt.Sprintf("d%d", i%dirs))
		mustMkdir(t, d)
		mustWrite(t, filepath.Join(d, fmt.Sprintf("f%04d", i)), content)
	}
	ownTree(t, f.srv, top)
	return top
}

// resetLinks puts alice's links back in stage/ after a swap moved them.
func (f *raceFixture) resetLinks(t *testing.T) {
	t.Helper()
	f.ownerLink(t, f.root, filepath.Join(f.share, "stage", "up"))
	f.ownerLink(t, f.victim, filepath.Join(f.share, "stage", "victim"))
	ownTree(t, f.srv, filepath.Join(f.share, "stage"))
}

// TestGrantArchiveSwapStalledReader is attack 1: bob downloads share/t as a tar, stops reading
// after the first 256 KiB (the walk waits in t/aaa, before t/zzz), swaps t/zzz for alice's link
// to her home, then reads on. The archive must hold nothing from outside the grant; the swap is
// refused while the walk runs.
func TestGrantArchiveSwapStalledReader(t *testing.T) {
	f := newRaceFixture(t)
	for i, after := range []int{0, 256 << 10, 4 << 20} {
		t.Run(fmt.Sprintf("read-%d", after), func(t *testing.T) {
			top := filepath.Join(f.share, fmt.Sprintf("t%d", i))
			mustMkdir(t, filepath.Join(top, "zzz"))
			mustWrite(t, filepath.Join(top, "zzz", "inside.txt"), "inside")
			mustWrite(t, filepath.Join(top, "aaa"), strings.Repeat("a", 32<<20))
			ownTree(t, f.srv, top)
			f.resetLinks(t)
			req, _ := http.NewRequest("GET", f.e.url+f.url("content", top)+"?archive=tar", nil)
			req.Header.Set("Authorization", "Bearer "+f.e.token("bob"))
			res, head := archiveHead(t, req, after)
			st := f.swap(filepath.Join(top, "zzz"), "up")
			rest, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			all := append(head, rest...)
			if bytes.Contains(all, []byte(secretMark)) || bytes.Contains(all, []byte(victimMark)) {
				t.Fatalf("the archive holds files from outside the grant (swap answered %v)", st)
			}
			if !bytes.Contains(all, []byte("aaaa")) {
				t.Fatal("the archive lacks t/aaa")
			}
			if st[0] != 503 {
				t.Fatalf("moving t/zzz away during the walk answered %d, want 503 (refused by the guard)", st[0])
			}
			f.intact(t)
		})
	}
}

// TestGrantLinkArchiveSwap is attack 1 through a read link to a directory: the link holder
// stalls, bob swaps.
func TestGrantLinkArchiveSwap(t *testing.T) {
	f := newRaceFixture(t)
	top := filepath.Join(f.share, "lt")
	mustMkdir(t, filepath.Join(top, "zzz"))
	mustWrite(t, filepath.Join(top, "aaa"), strings.Repeat("a", 32<<20))
	ownTree(t, f.srv, top)
	r := f.e.do("alice", "POST", "/v1/systems/hpc/links", map[string]any{"path": top, "access": "read", "expires_in_s": 600})
	if r.status != 201 {
		t.Fatalf("link: %d %s", r.status, r.body)
	}
	u := r.json(t)["url"].(string)
	req, _ := http.NewRequest("GET", f.e.url+u[strings.Index(u, "/v1/links/"):]+"?archive=tar", nil)
	res, head := archiveHead(t, req, 256<<10)
	st := f.swap(filepath.Join(top, "zzz"), "up")
	rest, _ := io.ReadAll(res.Body)
	if bytes.Contains(append(head, rest...), []byte(secretMark)) {
		t.Fatalf("the link's archive holds files from outside the grant (swap answered %v)", st)
	}
	if st[0] != 503 {
		t.Fatalf("swap during the link download answered %d, want 503", st[0])
	}
	f.intact(t)
}

// walkAttack runs op on a fresh tree of 3,000 files while bob swaps the tree's d5 for alice's
// link to victim/ after each delay; victim/ and secret.txt must come through unchanged.
func walkAttack(t *testing.T, name string, op func(f *raceFixture, top string) resp, okStatus int) {
	f := newRaceFixture(t)
	for i, delay := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond, 150 * time.Millisecond} {
		top := f.tree(t, fmt.Sprintf("%s%d", name, i), 10, 3000, "inside")
		f.resetLinks(t)
		var wg sync.WaitGroup
		var got resp
		wg.Go(func() { got = op(f, top) })
		time.Sleep(delay) // the moment of the swap varies; the assertion does not depend on it
		st := f.swap(filepath.Join(top, "d5"), "victim")
		wg.Wait()
		// 503: the swap came first and the operation waited out the guard behind it; 404 and 409:
		// the swap came first and the operation met what it left.
		if got.status != okStatus && got.status != 503 && got.status != 409 && got.status != 404 {
			t.Errorf("%s (swap after %v): %d %s", name, delay, got.status, got.body)
		}
		f.intact(t)
		t.Logf("%s, swap after %v: operation %d, moves %v", name, delay, got.status, st)
	}
}

// TestGrantRecursiveDeleteSwap is attack 2.
func TestGrantRecursiveDeleteSwap(t *testing.T) {
	walkAttack(t, "del", func(f *raceFixture, top string) resp {
		return f.e.do("bob", "DELETE", f.url("files", top)+"?recursive=true", nil)
	}, 204)
}

// TestGrantRecursiveChmodSwap: recursive chmod walks the same way.
func TestGrantRecursiveChmodSwap(t *testing.T) {
	walkAttack(t, "chmod", func(f *raceFixture, top string) resp {
		return f.e.do("bob", "POST", "/v1/systems/alice:hpc/ops/chmod", map[string]any{"path": top, "mode": "0777", "recursive": true})
	}, 200)
}

// TestGrantRecursiveCopySwap: a recursive copy of the walked tree must not copy victim/'s files
// into the grant.
func TestGrantRecursiveCopySwap(t *testing.T) {
	var dsts []string
	walkAttack(t, "copy", func(f *raceFixture, top string) resp {
		dst := top + ".copy"
		dsts = append(dsts, dst)
		return f.e.do("bob", "POST", "/v1/systems/alice:hpc/ops/copy", map[string]any{"source": top, "destination": dst, "recursive": true})
	}, 200)
	for _, d := range dsts {
		noMark(t, d, victimMark)
	}
}

// TestGrantTransferSourceSwap: a transfer whose source is the shared tree must not carry
// victim/'s files to bob's own system.
func TestGrantTransferSourceSwap(t *testing.T) {
	var dsts []string
	walkAttack(t, "tsrc", func(f *raceFixture, top string) resp {
		dst := filepath.Join(f.own, filepath.Base(top))
		dsts = append(dsts, dst)
		r := f.e.do("bob", "POST", "/v1/transfers", map[string]any{"recursive": true,
			"source": map[string]any{"system": "alice:hpc", "path": top}, "destination": map[string]any{"system": "own", "path": dst}})
		if r.status != 202 {
			return r
		}
		f.e.waitTransfer("bob", r.json(t)["id"].(string), time.Minute)
		return resp{status: 202}
	}, 202)
	for _, d := range dsts {
		noMark(t, d, victimMark)
	}
}

// TestGrantTransferDestinationSwap: a transfer into the shared tree must not write into victim/
// when a directory it writes into is swapped for alice's link to it.
func TestGrantTransferDestinationSwap(t *testing.T) {
	f := newRaceFixture(t)
	src := filepath.Join(f.own, "src")
	for i := range 2000 {
		d := filepath.Join(src, fmt.Sprintf("d%d", i%10))
		mustMkdir(t, d)
		mustWrite(t, filepath.Join(d, fmt.Sprintf("n%04d", i)), "new")
	}
	ownTree(t, f.srv, src)
	for i, delay := range []time.Duration{20 * time.Millisecond, 80 * time.Millisecond, 200 * time.Millisecond} {
		top := filepath.Join(f.share, fmt.Sprintf("tdst%d", i))
		mustMkdir(t, filepath.Join(top, "d5"))
		ownTree(t, f.srv, top)
		f.resetLinks(t)
		r := f.e.do("bob", "POST", "/v1/transfers", map[string]any{"recursive": true,
			"source": map[string]any{"system": "own", "path": src}, "destination": map[string]any{"system": "alice:hpc", "path": top}})
		if r.status != 202 {
			t.Fatalf("transfer: %d %s", r.status, r.body)
		}
		time.Sleep(delay)
		st := f.swap(filepath.Join(top, "d5"), "victim")
		f.e.waitTransfer("bob", r.json(t)["id"].(string), time.Minute)
		f.intact(t)
		t.Logf("swap after %v: moves %v", delay, st)
	}
}

// noMark fails if any regular file below dir contains mark.
func noMark(t *testing.T, dir, mark string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(mark)) {
				t.Errorf("%s holds a file from outside the grant", p)
			}
		}
		return nil
	})
}

// TestGrantLinksPointDown is attack 3: bob may not create a link that could come to resolve
// outside after a move (absolute, or climbing with ".."), nor extract one; a downward link is
// fine, and the owner keeps creating any link inside her root.
func TestGrantLinksPointDown(t *testing.T) {
	f := newRaceFixture(t)
	mustMkdir(t, filepath.Join(f.share, "d"))
	ownTree(t, f.srv, f.share)
	for _, c := range []struct {
		user, target string
		want         int
	}{
		{"bob", "../x", 403},
		{"bob", "a/../../x", 403},
		{"bob", f.share + "/d", 403},
		{"bob", "sub/x", 200},
		{"alice", "../x", 200},
	} {
		sys := "alice:hpc"
		if c.user == "alice" {
			sys = "hpc"
		}
		link := filepath.Join(f.share, "d", fmt.Sprintf("l-%s-%d", c.user, len(c.target)))
		r := f.e.do(c.user, "POST", "/v1/systems/"+sys+"/ops/symlink", map[string]any{"target": c.target, "link": link})
		if r.status != c.want {
			t.Errorf("%s symlink -> %q: %d %s, want %d", c.user, c.target, r.status, r.body, c.want)
		}
	}
	// An archive with a climbing link member, extracted by bob.
	arch := filepath.Join(f.share, "climb.tar")
	work := t.TempDir()
	mustMkdir(t, filepath.Join(work, "a"))
	if err := os.Symlink("../b", filepath.Join(work, "a", "l")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-cf", arch, "-C", work, "a").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	ownTree(t, f.srv, f.share)
	mustMkdir(t, filepath.Join(f.share, "x"))
	ownTree(t, f.srv, f.share)
	r := f.e.do("bob", "POST", "/v1/systems/alice:hpc/ops/extract", map[string]any{"archive": arch, "destination": filepath.Join(f.share, "x")})
	if r.status != 400 || !strings.Contains(string(r.body), "point down") {
		t.Errorf("bob extracting a climbing link: %d %s, want 400 naming the rule", r.status, r.body)
	}
	if r := f.e.do("alice", "POST", "/v1/systems/hpc/ops/extract", map[string]any{"archive": arch, "destination": filepath.Join(f.share, "x")}); r.status != 200 {
		t.Errorf("alice extracting the same archive: %d %s", r.status, r.body)
	}
}

// archiveHead sends req, an archive download, checks that it is answered 200 and reads the
// first n bytes of the body, leaving the rest unread (so the walk behind it waits at that
// point); the body is closed when the test ends.
func archiveHead(t *testing.T, req *http.Request, n int) (*http.Response, []byte) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != 200 {
		t.Fatalf("archive %s: %d", req.URL.Path, res.StatusCode)
	}
	head := make([]byte, n)
	if _, err := io.ReadFull(res.Body, head); err != nil {
		t.Fatal(err)
	}
	return res, head
}
