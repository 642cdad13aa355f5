package transfer

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/shell"
)

// Small files through tar. Over SFTP a small file costs about a dozen requests on the two
// sftp-servers (open, fstat, read, close at the source; open, fchmod, write, close, two
// setstats and a rename at the destination), and on a tree of 4 KiB files those requests, not
// the bytes, are the work: sshd and sftp-server spent more CPU than OpenSSH's own
// `ssh src tar c | ssh dst tar x`. So a batch of small files moves as one tar stream instead:
// `tar -c` on the source reads the batch's files (their names fed on its stdin, NUL-separated),
// sshapi reads that stream member by member and writes a new one in which each member is named
// with its file's temporary name (".name.sshapi-<id>.part", the source's modification time, and
// the source's mode or owner-only, see finalModeAtOnce), and `tar -x` on the destination writes
// it. The files are then verified by sha256 and renamed into place (by one command per batch,
// see batchrename.go; over SFTP, chmod'ed first, if written owner-only).
//
// What "verified" means here: the destination's sum is the sha256 of the temporary file on the
// destination's disk, read back after tar -x wrote it (by the batch's perl with Digest::SHA, or
// by sha256sum where that is missing); the source's sum is sshapi's sha256 of the
// bytes of the file's member as they passed through (what tar -c read from the file), taken only
// when the source's tar exited 0. GNU tar exits non-zero when a file changed (its size or ctime)
// or shrank while it read it, so a batch whose tar did not exit 0 has its sources summed on disk
// by sha256sum as before, and a file that changed while read fails verification and is copied
// again. So a verified file on the destination's disk holds, byte for byte, the source's content
// as tar read it, without the source reading every file a second time.
//
// Confinement is the SFTP path's: every item was checked against both roots (under the shared
// ends' guards) just before, the members' names are the same temporary names the SFTP path
// creates, and sshapi writes the destination's archive itself, with regular file members only
// and no name of the source's choosing. GNU tar (without --overwrite) creates each member with
// O_EXCL and, on EEXIST, unlinks what is there and creates again, so an entry planted at a
// temporary name is replaced, never followed — as createTemp does. The source's tar runs with
// -P and absolute names (a name given to tar that starts with "-" could be taken for an option;
// an absolute one cannot), --no-recursion, and without following symlinks: a file that became a
// symlink or a directory arrives as a member of another type and is left to the SFTP path,
// which judges it as before. --hard-dereference keeps hard-linked files whole.
//
// Anything the tar path does not deliver — a member missing (tar could not read the file), of
// another type, a destination tar that did not exit 0, a tar that is missing or too old — is
// copied over SFTP within the same batch, so a failure is reported by the SFTP path's own
// classification; a tar path that cannot work on a system is switched off for the rest of the
// run. A destination that is full fails the batch's files with ErrNoSpace at once.
//
// Memory stays bounded: the stream passes through one member at a time (tar's buffers, the
// channels' windows); a batch holds at most tarBatchMaxFactor × Config.BatchFiles files and
// tarBatchBytes bytes, and a run moves at most tarWorkers(run) batches at once, two exec
// channels each, then one more for the batch's verification and renames (batchrename.go), whose
// stdin holds the batch's names and sums (about 1 MiB for 4,096 files of short names); the
// streamed sums wait in tarSums, at most one per file of the batches in flight.
//
// Batch size. Every batch costs three sessions on the servers (tar -c, tar -x, the verifying
// perl), each an sshd fork, a shell and a program start: on a tree of 30,000 files of 4 KiB
// with batches of 1,024 files those 90 sessions cost about as much server CPU as the whole
// OpenSSH tar pipe's sshd spends relaying the data. So a directory's walk stores its first
// chunk small (tarBatchFactor × BatchFiles items: the first batch starts early) and each next
// one twice as large up to tarBatchMaxFactor × BatchFiles, and a chunk's files go as one batch.

// Bounds of one tar batch: files, and bytes of their sizes together.
const (
	tarBatchFactor    = 16 // files of a walk's first chunk per Config.BatchFiles (1,024 by default)
	tarBatchMaxFactor = 64 // tar batch files per Config.BatchFiles at most (4,096 by default)
	tarBatchBytes     = 64 << 20
	tarStderrMax      = 8 << 10
)

// tarCreateArgs is the source's tar: names on stdin, the archive on stdout.
var tarCreateArgs = []string{"tar", "-c", "-f", "-", "-P", "--hard-dereference", "--null", "--no-recursion", "-T", "-"}

// tarExtractArgs is the destination's tar: the archive on stdin, members' modes as recorded (not
// narrowed by the umask).
var tarExtractArgs = []string{"tar", "-x", "-f", "-", "-P", "-p", "--no-same-owner"}

// finalModeAtOnce reports whether a tar batch may write a file with its final permission bits
// mode rather than owner-only: when the owner can read it (for the sha256) and nobody else can
// write it, others could only read what the source holds, and could not change it between its
// verification and its rename. Other files are written owner-only and chmod'ed after
// verification, as over SFTP.
func finalModeAtOnce(mode uint32) bool { return mode&0o400 != 0 && mode&0o022 == 0 }

// errTarEnded unblocks writes to a destination tar that has exited.
var errTarEnded = errors.New("the destination's tar exited")

// tarWorkers is how many tar batches a run moves at once: one per stream (as many as the
// round-trip time asks for to fill the link), at least 3 so that one batch's verification and
// renames overlap the next ones' streams.
func (r *run) tarWorkers() int { return max(3, len(r.streams)) }

// tarable reports whether it may go through a tar batch: absolute paths (see above).
func tarable(it *Item) bool {
	return path.IsAbs(it.Source) && path.IsAbs(it.Destination)
}

// tarBatches cuts items into tar batches of at most n files and tarBatchBytes bytes.
func tarBatches(items []*Item, n int) [][]*Item { return chunks(items, n, tarBatchBytes) }

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string { return strings.TrimSpace(c.buf.String()) }

// tarBatch moves batch's files to their temporary names through tar. moved[i] is non-zero when
// batch[i] was written by a destination tar that exited 0 (its sum is still to be checked), and
// says which attributes it got. An error says why the others were not; one wrapping ErrNoSpace
// applies to all of them.
func (r *run) tarBatch(ctx context.Context, batch []*Item) (moved []attrsDone, err error) {
	moved = make([]attrsDone, len(batch))
	want := make(map[string][]int, len(batch))
	var list bytes.Buffer
	for i, it := range batch {
		want[it.Source] = append(want[it.Source], i)
		list.WriteString(it.Source)
		list.WriteByte(0)
	}
	ctx, cancel := context.WithTimeout(ctx, r.e.cfg.CommandTimeout)
	defer cancel()
	sctx, stopSrc := context.WithCancel(ctx)
	defer stopSrc()
	srcOut, srcW := io.Pipe()
	dstIn, dstW := io.Pipe()
	srcErr, dstErr := &cappedBuffer{max: tarStderrMax}, &cappedBuffer{max: tarStderrMax}
	var srcStatus, dstStatus int
	var srcRunErr, dstRunErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		srcStatus, srcRunErr = command.Exec{Pool: r.srcR.pool, Target: r.srcR.t}.Run(sctx, shell.Command(tarCreateArgs...), &list, srcW, srcErr)
		srcW.CloseWithError(srcRunErr)
	})
	wg.Go(func() {
		dstStatus, dstRunErr = command.Exec{Pool: r.dstR.pool, Target: r.dstR.t}.Run(ctx, shell.Command(tarExtractArgs...), dstIn, io.Discard, dstErr)
		dstIn.CloseWithError(errTarEnded)
	})
	sums := make([]string, len(batch))
	rerr := r.tarRewrite(srcOut, dstW, batch, want, moved, sums)
	if rerr != nil {
		stopSrc()
		dstW.CloseWithError(rerr)
	} else {
		_ = dstW.Close()
	}
	_, _ = io.Copy(io.Discard, srcOut) // what follows the archive's end, or is left after a failure
	wg.Wait()
	none := func(err error) ([]attrsDone, error) { return make([]attrsDone, len(batch)), err }
	switch {
	case ctx.Err() != nil:
		return none(context.Cause(ctx))
	case dstRunErr == nil && dstStatus != 0 && tarNoSpace(dstErr.String()):
		return none(fmt.Errorf("%w: tar -x: %s", ErrNoSpace, firstLine(dstErr.String())))
	case rerr != nil:
		if srcRunErr != nil && !errors.Is(srcRunErr, context.Canceled) {
			rerr = fmt.Errorf("%w (source: %w)", rerr, srcRunErr)
		}
		return none(rerr)
	case dstRunErr != nil:
		return none(fmt.Errorf("tar -x on the destination: %w", dstRunErr))
	case dstStatus != 0:
		r.tarBroken(dstStatus, dstErr.String())
		return none(fmt.Errorf("tar -x on the destination exited with status %d: %s", dstStatus, firstLine(dstErr.String())))
	}
	if srcRunErr == nil && srcStatus != 0 {
		r.tarBroken(srcStatus, srcErr.String())
		err = fmt.Errorf("tar -c on the source exited with status %d: %s", srcStatus, firstLine(srcErr.String()))
	}
	if err == nil && srcRunErr == nil && r.t.Verify == VerifySHA256 {
		// tar -c exited 0: no file changed (size or ctime) while it read it, so each member's
		// bytes are the file's content as read; verify takes their sums for the sources'.
		for i, it := range batch {
			if moved[i] != 0 {
				r.tarSums.Store(it.Source, sums[i])
			}
		}
	}
	return moved, err
}

// countingReader counts what a tar batch reads from the source's stream as read and in flight.
type countingReader struct {
	r    *run
	src  io.Reader
	sent *int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.src.Read(p)
	if n > 0 {
		c.r.bytesRead.Add(int64(n))
		c.r.e.metrics.bytesRead.Add(float64(n))
		c.r.inflight.Add(int64(n))
		*c.sent += int64(n)
	}
	return n, err
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// tarBroken switches the tar path off for the run when a tar's exit says the tool is missing or
// does not take the options used.
func (r *run) tarBroken(status int, stderr string) {
	if status == 126 || status == 127 || strings.Contains(stderr, "not found") ||
		strings.Contains(stderr, "unrecognized option") || strings.Contains(stderr, "invalid option") ||
		strings.Contains(stderr, "unknown option") || strings.Contains(stderr, "Usage:") {
		if !r.tarOff.Swap(true) {
			r.e.log.Info("transfer: tar unusable; small files go over SFTP", "id", r.t.ID, "status", status, "stderr", firstLine(stderr))
		}
	}
}

// tarRewrite reads the source's archive from src and writes to dst one member per regular file
// of batch, named with its temporary name; it sets moved[i] for the files written, and sums[i] to
// the sha256 of the bytes written for it. It returns
// nil at the source archive's end.
func (r *run) tarRewrite(src io.Reader, dst io.Writer, batch []*Item, want map[string][]int, moved []attrsDone, sums []string) error {
	// Counted as copying, with its bytes in flight, like copyRange: the heartbeat's rate and
	// the slow-run check see a tar batch's progress.
	r.copying.Add(1)
	defer r.copying.Add(-1)
	var sent int64
	defer func() { r.inflight.Add(-sent) }()
	tr := tar.NewReader(src)
	bw := bufio.NewWriterSize(dst, 64<<10)
	tw := tar.NewWriter(bw)
	// One copy buffer and one hash for the batch: io.Copy would allocate 32 KiB per member,
	// which on a batch of 4 KiB files was most of what sshapi allocated (and its GC's work).
	buf := make([]byte, 32<<10)
	h := sha256.New()
	cr := &countingReader{r: r, src: tr, sent: &sent}
	to := io.MultiWriter(tw, h)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the source's tar stream: %w", err)
		}
		idxs := want[hdr.Name]
		if len(idxs) == 0 {
			return fmt.Errorf("the source's tar stream holds %q, which was not asked for", hdr.Name)
		}
		i := idxs[0]
		want[hdr.Name] = idxs[1:]
		if hdr.Typeflag != tar.TypeReg {
			continue // a link or a directory now: the SFTP path judges it
		}
		it := batch[i]
		r.resize(it, hdr.FileInfo())
		mode, done := uint32(tempMode), doneTimes
		if finalModeAtOnce(it.mode) {
			mode, done = it.mode, doneTimes|doneMode
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: tempName(it.Destination, r.t.ID),
			Mode: int64(mode), Size: hdr.Size, ModTime: time.Unix(hdr.ModTime.Unix(), 0)}); err != nil {
			return fmt.Errorf("write the destination's tar stream: %w", err)
		}
		h.Reset()
		_, err = io.CopyBuffer(to, cr, buf)
		if err != nil {
			return fmt.Errorf("copy %s through tar: %w", it.Source, err)
		}
		moved[i], sums[i] = done, hex.EncodeToString(h.Sum(nil))
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write the destination's tar stream: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write the destination's tar stream: %w", err)
	}
	return nil
}
