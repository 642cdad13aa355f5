package soak

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// smallFSSize is the size of the filesystem FaultDiskFull fills. Each fault's transfer of the
// large file (3 MiB by default) finishes into it once space is back and stays for the final
// check, so it holds about ten faults' worth.
const smallFSSize = 32 << 20

// smallFS is a small tmpfs mounted inside the run directory on the sshd's side.
type smallFS struct {
	dir string
}

// mountSmallFS mounts a tmpfs of smallFSSize on dir (made if missing), owned by uid:gid. It
// needs root (CAP_SYS_ADMIN); the mount is in the host's mount namespace so that the sshd's
// session processes see it.
func mountSmallFS(dir string, uid, gid int) (*smallFS, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mount point: %w", err)
	}
	opts := fmt.Sprintf("size=%d,mode=0755,uid=%d,gid=%d", smallFSSize, uid, gid)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return nil, fmt.Errorf("mount a tmpfs on %s (root needed): %w", dir, err)
	}
	return &smallFS{dir: dir}, nil
}

// unmount detaches the filesystem (lazily, should anything still hold a file in it).
func (s *smallFS) unmount() { _ = syscall.Unmount(s.dir, syscall.MNT_DETACH) }

// fill writes a filler file until the filesystem reports ENOSPC and returns its path.
func (s *smallFS) fill() (string, error) {
	p := filepath.Join(s.dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		return "", fmt.Errorf("filler: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	cerr := f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		return p, fmt.Errorf("filling %s: want ENOSPC, got %w", s.dir, errors.Join(err, cerr))
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.dir, &st); err != nil || st.Bavail != 0 {
		return p, fmt.Errorf("%s not full after the filler: %d blocks free (%v)", s.dir, st.Bavail, err)
	}
	return p, nil
}

// fullAttempt is one write into the full filesystem: an upload (answered at once) or a
// transfer (acknowledged, then waited for after the load).
type fullAttempt struct {
	Op         string
	Path       string
	Status     int
	Detail     string
	TransferID string
	Src        string
}

// diskFull is FaultDiskFull: it fills the small filesystem, sends three uploads into it (system
// a) and starts a transfer of the large file into it (a → b), then frees it. An upload must be
// answered 507 (or another 4xx) and leave nothing; the transfer must end either failed with a
// reason and nothing at its destination, or — once space is back — succeeded and verified
// (checkDiskFull, after the load).
func (r *run) diskFull(ctx context.Context) error {
	filler, err := r.small.fill()
	defer os.Remove(filler)
	if err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		b := make([]byte, 512<<10)
		_, _ = rand.Read(b)
		sum := sha256.Sum256(b)
		id := r.nextID("full")
		p := filepath.Join(r.small.dir, id)
		req, _ := http.NewRequestWithContext(ctx, "PUT", r.base+"/v1/systems/a/content/"+remote(p), bytes.NewReader(b))
		req.Header.Set("X-Checksum-Sha256", hex.EncodeToString(sum[:]))
		req.Header.Set("X-Request-Id", id)
		start := time.Now()
		st, h, body, err := r.send(req)
		res := outcome(st, h, body, err, http.StatusInsufficientStorage)
		res.op, res.start, res.latency = "upload-full-disk", start, time.Since(start)
		r.record(res)
		r.mu.Lock()
		r.full = append(r.full, fullAttempt{Op: "upload", Path: p, Status: st, Detail: shorten(string(body), err)})
		r.mu.Unlock()
		r.logf("upload into the full filesystem: %d %s", st, shorten(string(body), err))
	}
	id := r.nextID("full-tr")
	dst := filepath.Join(r.small.dir, id)
	spec := map[string]any{"source": map[string]any{"system": "a", "path": r.bigSrc},
		"destination": map[string]any{"system": "b", "path": dst}, "verify": "sha256", "idempotency_key": id}
	var t struct {
		ID string `json:"id"`
	}
	st, _, body, err := r.callBody(ctx, "POST", "/v1/transfers", spec, &t)
	a := fullAttempt{Op: "transfer", Path: dst, Src: r.bigSrc, Status: st, TransferID: t.ID, Detail: shorten(string(body), err)}
	r.mu.Lock()
	r.full = append(r.full, a)
	r.mu.Unlock()
	if err != nil || t.ID == "" {
		return nil // judged in checkDiskFull
	}
	// Let it meet the full filesystem before space comes back.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		var out struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if st, _, err := r.call(ctx, "GET", "/v1/transfers/"+t.ID, nil, &out); err == nil && st == 200 &&
			(out.Error != "" || out.Status == "failed" || out.Status == "succeeded") {
			r.note = fmt.Sprintf("transfer into the full filesystem: %s: %s", out.Status, out.Error)
			r.logf("%s", r.note)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil
}

// shorten is a body or an error in one short line, for the report.
func shorten(body string, err error) string {
	s := strings.Join(strings.Fields(body), " ")
	if err != nil {
		s = strings.TrimSpace(s + " " + err.Error())
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// checkDiskFull judges the writes into the full filesystem after the load: each upload answered
// 507 or another 4xx with nothing at its path; each transfer terminal, and either succeeded with
// equal SHA-256 at both ends or failed with nothing at its destination.
func (r *run) checkDiskFull(ctx context.Context, rep *Report) {
	for _, a := range r.full {
		line := fmt.Sprintf("%s %s: %d %s", a.Op, filepath.Base(a.Path), a.Status, a.Detail)
		_, statErr := os.Stat(a.Path)
		exists := !errors.Is(statErr, fs.ErrNotExist)
		bad := ""
		switch a.Op {
		case "upload":
			switch {
			case a.Status < 400 || a.Status >= 500 && a.Status != http.StatusInsufficientStorage:
				bad = "not 507 or another 4xx"
			case exists:
				bad = "a file was left at the path"
			}
		case "transfer":
			if a.TransferID == "" {
				bad = "not acknowledged"
				break
			}
			status, msg := r.waitTransfer(ctx, a.TransferID, 3*time.Minute)
			line = fmt.Sprintf("transfer %s into the full filesystem: %s: %s", a.TransferID, status, msg)
			switch {
			case status == "succeeded":
				x, errA := fileSHA256(a.Src)
				y, errB := fileSHA256(a.Path)
				if errA != nil || errB != nil || x != y {
					bad = fmt.Sprintf("succeeded but the ends differ (%s %v, %s %v)", x, errA, y, errB)
				}
			case status == "failed" && exists:
				bad = "failed and left a file at its destination"
			case status != "failed" && status != "canceled":
				bad = "not finished"
			}
		}
		if bad != "" {
			line += " — " + bad
			rep.Check.DiskFullBad = append(rep.Check.DiskFullBad, line)
		}
		rep.Check.DiskFull = append(rep.Check.DiskFull, line)
	}
}

// waitTransfer polls a transfer until it is terminal or wait has passed and returns its last
// status and error.
func (r *run) waitTransfer(ctx context.Context, id string, wait time.Duration) (string, string) {
	deadline := time.Now().Add(wait)
	for {
		var out struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		st, _, err := r.call(ctx, "GET", "/v1/transfers/"+id, nil, &out)
		done := err == nil && st == 200 && (out.Status == "succeeded" || out.Status == "failed" || out.Status == "canceled")
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			return out.Status, out.Error
		}
		time.Sleep(250 * time.Millisecond)
	}
}
