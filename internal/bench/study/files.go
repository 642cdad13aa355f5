package study

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/service"
)

// FilesOptions configure the many-small-files bench. Zero values take the defaults noted.
type FilesOptions struct {
	// Files in the tree (default 100,000) of FileSize bytes each (default 4 KiB), in
	// subdirectories of PerDir files (default 1,000).
	Files    int
	FileSize int64
	PerDir   int
	// Compare adds the OpenSSH tar pipe and scp -3 -r; NoSCP leaves scp -3 -r out.
	Compare, NoSCP bool
	// Rounds is how many times sshapi and the tar pipe each copy the tree, in ABBA order
	// (default 1; see bench.FilesBench.Rounds).
	Rounds int
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Profile, when set, is a file that receives a CPU profile of sshapi's run.
	Profile string
}

// PaperFilesOptions are the many-small-files runs of `bench paper`: files of 4 KiB beside the
// OpenSSH tar pipe (two rounds each, ABBA) and scp -3 -r (once).
func PaperFilesOptions(files int, progress io.Writer) FilesOptions {
	return FilesOptions{Files: files, FileSize: 4 << 10, Compare: true, Rounds: 2, Progress: progress}
}

// RunFiles starts a throwaway stock sshd and an in-process sshapi, registers the sshd as two
// systems, writes a tree of o.Files random files in the remote user's home and copies it from
// one system to the other through sshapi (SHA-256 verified) and, with o.Compare, through OpenSSH;
// every copy is compared with the source afterwards.
func RunFiles(ctx context.Context, o FilesOptions) (*bench.FilesReport, error) {
	if o.Files <= 0 {
		o.Files = 100_000
	}
	if o.FileSize <= 0 {
		o.FileSize = 4 << 10
	}
	if o.PerDir <= 0 {
		o.PerDir = 1000
	}
	settled := settle(ctx)
	loadStart := loadAverage()
	l, err := startLab(ctx, "")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	base, err := envConfig()
	if err != nil {
		return nil, err
	}
	api, stop, err := l.service(ctx, "data", base, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	ends := &pathEnds{lab: l}
	defer ends.close()
	src, err := ends.system(ctx, api, "files-a", nil)
	if err != nil {
		return nil, err
	}
	dst, err := ends.system(ctx, api, "files-b", nil)
	if err != nil {
		return nil, err
	}
	root, err := l.userDir("bench-files")
	if err != nil {
		return nil, err
	}
	srcDir := filepath.Join(root, "src")
	made := time.Now()
	if err := writeTree(srcDir, o.Files, o.PerDir, o.FileSize); err != nil {
		return nil, err
	}
	if err := l.chownTree(srcDir); err != nil {
		return nil, err
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "small files: wrote %d files of %d bytes in %.1fs\n", o.Files, o.FileSize, time.Since(made).Seconds())
	}

	rep := &bench.FilesReport{Meta: Machine(ctx)}
	rep.Meta.Started, rep.Meta.Runs = time.Now(), 1
	rep.Meta.SSHD = "OpenSSH sshd on 127.0.0.1, stock configuration; both systems are this sshd, registered twice"
	rep.Meta.Versions = map[string]map[string]string{"sshapi": {"sshapi": service.Version}}
	fb := &bench.FilesBench{API: api, Src: src, Dst: dst, SrcDir: srcDir, DstBase: filepath.Join(root, "dst"), Files: o.Files, FileSize: o.FileSize,
		Peers: o.Compare, NoSCP: o.NoSCP, Rounds: o.Rounds, SSHDPIDs: l.sshdPIDs(), Progress: o.Progress, Profile: o.Profile, Report: rep,
		Check: func(dir string) error { return sameTree(srcDir, dir, o.Files) },
		Remove: func(dir string) error {
			if !strings.HasPrefix(dir, root+string(filepath.Separator)) {
				return fmt.Errorf("remove %s: not under %s", dir, root)
			}
			return os.RemoveAll(dir)
		}}
	err = fb.Run(ctx)
	rep.Meta.Notes = []string{
		fmt.Sprintf("a tree of %d files of %d random bytes each, %d per subdirectory, in the remote user's home; each target copies it from one system to the other (both this sshd, registered twice as `files-a` and `files-b`, so sshapi moves the data through itself rather than with a server-side copy), into a directory of its own; seconds run from start to the copy being complete: for sshapi `POST /v1/transfers` (`recursive: true`, `verify: sha256`) to `succeeded`, polled every 100 ms", o.Files, o.FileSize, o.PerDir),
		"sshapi verifies every file with SHA-256 before it succeeds: on the source, of the bytes `tar -c` read (when it exits 0; a batch whose tar reported a change is hashed on disk instead), and on the destination, of the file as read back from disk after `tar -x` wrote it; the tar pipe (`ssh src 'tar -C PARENT -cf - src' | ssh dst 'mkdir DIR && tar -C DIR --strip-components=1 -xf -'`, two ssh processes and two connections) and `scp -3 -r` (relayed through this host) verify nothing",
		roundsNote(o.Rounds),
		"after every run, outside its time, the bench compares the copy with the source byte for byte on this machine's disk and fails the run if a file is missing, extra or different; the copies are removed once every target ran, not between runs (right after a deletion of tens of thousands of files this machine's disk made the next copy spend seconds in the kernel: a local tar pipe of 30,000 files took 2.6 s, and 17.6 s right after a tree of that size was deleted)",
		"peak RSS: the highest resident set of the bench process (which hosts sshapi) sampled from /proc/self/status every 100 ms during sshapi's run, beside its resident set just before; the OpenSSH clients run as separate processes and are not in it",
		"CPU: user+system seconds of the bench process (less its thread that samples sshd, whose own CPU is measured and taken off) and its waited-for children (the OpenSSH clients), and of the sshd process tree (sampled from /proc every 100 ms, with the children each process waited for)",
		fmt.Sprintf("1-minute load average when the runs started: %s; when they ended: %s", loadStart, loadAverage()),
		settled,
	}
	return rep, err
}

// writeTree writes n files of size random bytes under dir, perDir per subdirectory
// (d00000/f00000).
func writeTree(dir string, n, perDir int, size int64) error {
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	buf := make([]byte, size)
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%05d", i/perDir))
		if i%perDir == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return fmt.Errorf("tree: %w", err)
			}
		}
		for j := 0; j+8 <= len(buf); j += 8 {
			binary.LittleEndian.PutUint64(buf[j:], rng.Uint64())
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i%perDir)), buf, 0o644); err != nil {
			return fmt.Errorf("tree: %w", err)
		}
	}
	return nil
}

// chownTree gives everything under root (root included) to the remote user.
func (l *lab) chownTree(root string) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return l.chown(p)
	})
}

// sameTree checks that dst holds exactly the regular files of src (want of them), byte for byte.
func sameTree(src, dst string, want int) error {
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		a, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("%s differs", rel)
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("the source has %d files, want %d", n, want)
	}
	m := 0
	err = filepath.WalkDir(dst, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			m++
		}
		return err
	})
	if err == nil && m != n {
		err = fmt.Errorf("the copy has %d entries that are not directories, the source %d files", m, n)
	}
	return err
}

// roundsNote says in which order the targets ran.
func roundsNote(rounds int) string {
	if rounds < 2 {
		return "each target ran once, in the order of the table"
	}
	return fmt.Sprintf("sshapi and the tar pipe each ran %d times, in ABBA order (sshapi first in odd rounds, the tar pipe first in even ones), scp -3 -r once, last: on this machine's ext4 disk the kernel's cost of creating a file varies several-fold from one copy to the next (in one fresh directory its first 5,000 files of 4 KiB cost about 620 µs of system time each, the next 5,000 145 µs, the 5,000 after those 45 µs), so one run each compares the disk's states as much as the targets; the line under the table divides every file each copied by every second it took", rounds)
}

// FilesSection writes the many-small-files report into a Markdown document.
func FilesSection(w io.Writer, r *bench.FilesReport) error {
	if r == nil || len(r.Runs) == 0 {
		return nil
	}
	return writeSection(w, "Many small files", "A tree of small files copied from one system to another: sshapi's `POST /v1/transfers`, SHA-256 verified, beside OpenSSH's usual ways on the same servers. \"sshapi ÷ target (files/s)\" above 1 means sshapi was faster.",
		r.Meta.Notes, r.WriteMarkdown, "")
}
