package transfer

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// fullFS mounts a tmpfs of size bytes on dir (made if missing), owned by srv's user, fills it
// to ENOSPC with a file that root owns and returns that file. It needs root.
func fullFS(t *testing.T, srv *sshtest.Server, dir string, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	u, err := user.Lookup(srv.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=%d,mode=0755,uid=%d,gid=%d", size, uid, gid)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for err == nil {
		_, err = f.Write(buf)
	}
	_ = f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: want ENOSPC, got %v", dir, err)
	}
	return filler
}

// TestFullDestinationSaysNoSpace transfers a small file (a tar batch) and a large one (SFTP
// ranges) into a full file system: while the transfer retries, its error says that the
// destination has no space left (not "SSH_FX_FAILURE"), and once space is freed it completes.
func TestFullDestinationSaysNoSpace(t *testing.T) {
	cfg := testConfig()
	cfg.MaxItemAttempts = 1000
	h := newHarness(t, cfg)
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	h.sys.add("alice", "a", a, "")
	h.sys.add("alice", "b", b, "")
	srcDir, dstDir := a.MkTemp(t), b.MkTemp(t)
	for _, c := range []struct {
		name string
		size int64
	}{{"small", 300 << 10}, {"large", 3 << 20}} {
		t.Run(c.name, func(t *testing.T) {
			tree := filepath.Join(srcDir, c.name)
			if err := os.MkdirAll(tree, 0o755); err != nil {
				t.Fatal(err)
			}
			want := randomFile(t, filepath.Join(tree, "f"), c.size, 7)
			owned(t, a, tree, filepath.Join(tree, "f"))
			mnt := filepath.Join(dstDir, c.name)
			filler := fullFS(t, b, mnt, 8<<20)
			tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: tree},
				Destination: Endpoint{System: "b", Path: filepath.Join(mnt, "copy")}, Recursive: true, ChunkSize: MinChunkSize})
			tr = h.wait("alice", tr.ID, 2*time.Minute, func(tr *Transfer) bool {
				return strings.Contains(tr.Error, "no space left on the destination")
			})
			if strings.Contains(tr.Error, "SSH_FX_FAILURE") && !strings.Contains(tr.Error, "no space") {
				t.Fatalf("error %q", tr.Error)
			}
			t.Logf("status %s, error %q", tr.Status, tr.Error)
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			tr = h.wait("alice", tr.ID, 2*time.Minute, nil)
			if tr.Status != StatusSucceeded {
				t.Fatalf("after freeing space: %+v", tr)
			}
			if got := fileSHA(t, filepath.Join(mnt, "copy", "f")); got != want {
				t.Fatalf("copy sha256 %s, want %s", got, want)
			}
		})
	}
}
