package transfer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/sshapi/sshapi/internal/storage"
)

// errSourceChanged is wrapped when an object run's source file changed while it was copied.
var errSourceChanged = errors.New("source changed during the transfer")

// partTries is how often one part is sent before the file gives up for this round (a part the
// server refused as corrupt, BadDigest, is sent again at once).
const partTries = 3

// partSize is the part size of a file of size bytes into a destination with capabilities c:
// the chunk size, at least the backend's minimum, grown (in whole MiB) so that the file needs
// at most MaxParts parts.
func partSize(size, chunk int64, c storage.Capabilities) int64 {
	ps := max(chunk, c.MinPartSize, 1)
	if c.MaxParts > 0 && size > ps*int64(c.MaxParts) {
		ps = (size + int64(c.MaxParts) - 1) / int64(c.MaxParts)
		ps = (ps + 1<<20 - 1) &^ (1<<20 - 1)
	}
	if c.MaxPartSize > 0 {
		ps = min(ps, c.MaxPartSize)
	}
	return ps
}

// srcVersion names the content version of a source entry: its ETag where the backend has one,
// else its size and modification time.
func srcVersion(e *storage.Entry) string {
	if e.ETag != "" {
		return "etag:" + e.ETag
	}
	return fmt.Sprintf("%d/%d", e.Size, e.ModTime.UnixNano())
}

// objectFile copies one file of an object run: it resumes the file's recorded upload or starts
// one, sends the missing parts, verifies and commits.
func (r *run) objectFile(ctx context.Context, i int, it *Item) error {
	o := r.obj
	// The upload goes through the destination's channels striped (see objstripe.go).
	sb, db := o.src.backend(i), o.dst.uploadBackend(i)
	if err := r.recheck(ctx); err != nil {
		return err
	}
	se, err := sb.Stat(ctx, it.Source)
	if err != nil {
		return fmt.Errorf("source %s: %w", it.Source, err)
	}
	if se.Type != storage.TypeFile {
		return permanent(fmt.Errorf("source %s is no longer a regular file", it.Source))
	}
	version := srcVersion(se)
	o.mu.Lock()
	rec := o.uploads[it.Seq]
	o.mu.Unlock()
	if rec != nil && rec.SrcETag != version {
		r.e.log.Info("transfer: source changed; restarting the file", "id", r.t.ID, "file", it.Source)
		if err := r.resetObject(ctx, db, it, rec); err != nil {
			return err
		}
		rec = nil
	}
	if rec == nil && (se.Size != it.Size || se.ModTime.Unix() != it.mtime) {
		r.mu.Lock()
		r.bytesTotal.Add(se.Size - it.Size)
		it.Size, it.mtime = se.Size, se.ModTime.Unix()
		r.mu.Unlock()
	}
	if rec == nil { // between buckets of one server: copied there (objsrvcopy.go)
		if ok, err := r.objectServerCopy(ctx, i, it, se); ok {
			return err
		}
	}
	opts := storage.UploadOptions{Size: it.Size, Overwrite: true, Parents: true}
	var up storage.Upload
	if rec != nil {
		o.mu.Lock()
		known := slices.Clone(rec.Parts)
		o.mu.Unlock()
		up, err = db.Resume(ctx, it.Destination, rec.UploadID, known, opts)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			r.e.log.Info("transfer: upload gone; restarting the file", "id", r.t.ID, "file", it.Destination)
			if err := r.resetObject(ctx, db, it, rec); err != nil {
				return err
			}
			rec = nil
		case err != nil:
			return err
		default:
			confirmed := up.Parts()
			var lost int64
			for _, p := range known {
				lost += p.Size
			}
			for _, p := range confirmed {
				lost -= p.Size
			}
			if lost != 0 {
				r.e.log.Info("transfer: parts not confirmed by the server are sent again", "id", r.t.ID, "file", it.Destination, "bytes", lost)
				r.bytesDone.Add(-lost)
				r.mu.Lock()
				it.BytesDone -= lost
				r.mu.Unlock()
			}
			o.mu.Lock()
			rec.Parts = confirmed
			o.mu.Unlock()
		}
	}
	if rec == nil {
		if up, err = db.Create(ctx, it.Destination, opts); err != nil {
			return err
		}
		caps := db.Capabilities()
		if !o.dst.sftp() && caps.MinPartSize > 0 && it.Size <= caps.MinPartSize {
			// A small object goes whole at Commit (see storage.Upload): nothing is on the
			// server before, so there is nothing to record, resume or reap; a failed
			// attempt only drops what the backend holds.
			rec = &UploadRecord{Seq: it.Seq, Dst: it.Destination, SrcETag: version, PartSize: partSize(it.Size, r.t.ChunkSize, caps), transient: true}
			defer func() { _ = up.Abort(context.WithoutCancel(ctx)) }() // after Commit a no-op
		}
	}
	if rec == nil {
		id, err := up.ID(ctx)
		if err != nil {
			_ = up.Abort(context.WithoutCancel(ctx))
			return err
		}
		rec = &UploadRecord{Seq: it.Seq, UploadID: id, Dst: it.Destination, SrcETag: version,
			PartSize: partSize(it.Size, r.t.ChunkSize, db.Capabilities())}
		if err := r.e.db.saveUpload(context.WithoutCancel(ctx), r.t.ID, *rec); err != nil {
			_ = up.Abort(context.WithoutCancel(ctx))
			return dbe(err)
		}
		o.mu.Lock()
		o.uploads[it.Seq] = rec
		o.mu.Unlock()
		r.mu.Lock()
		it.staged, it.BytesDone = true, 0
		r.mu.Unlock()
	}
	o.mu.Lock()
	hashOff, hashState := rec.HashOff, rec.HashState
	o.mu.Unlock()
	oh, err := newOrderedHash(hashOff, hashState)
	if err != nil {
		r.e.log.Warn("transfer: saved hash state unusable; re-reading the file", "id", r.t.ID, "file", it.Source, "err", err)
		oh, _ = newOrderedHash(0, nil)
	}
	// The source's own sum (sha256sum over SSH) runs on the server while the parts move.
	sctx, stopSum := context.WithCancel(ctx)
	srcSum := make(chan sumResult, 1)
	go func() {
		var res sumResult
		if r.t.Verify == VerifySHA256 {
			res.sum, res.err = r.objectSum(sctx, o.src, it.Source)
		}
		srcSum <- res
	}()
	defer func() { stopSum(); <-srcSum }()
	// An SSH destination hashes the parts as they land (objdestsum.go).
	done := map[int]storage.Part{}
	for _, p := range up.Parts() {
		done[p.Number] = p
	}
	ds := r.startObjectDestSum(ctx, it, up, rec.PartSize, done)
	defer ds.close()
	err = r.objectParts(ctx, i, it, rec, up, oh, done, ds)
	if err == nil {
		res := <-srcSum
		srcSum <- res // for the deferred wait
		if err = res.err; err == nil {
			err = r.objectFinish(ctx, i, it, rec, up, oh.sum(), res.sum, ds)
		}
	}
	if err != nil {
		releaseUpload(up) // resumed in a later round: its extra handles are not kept meanwhile
	}
	return err
}

// sumResult is a checksum computed on a server.
type sumResult struct {
	sum string
	err error
}

// objectParts sends the parts of it that upload up does not have (done has those it has),
// several at once, and hashes the whole file in order (re-reading from the source finished parts
// beyond the saved hash prefix); ds, when not nil, is told of each part written.
func (r *run) objectParts(ctx context.Context, i int, it *Item, rec *UploadRecord, up storage.Upload, oh *orderedHash,
	done map[int]storage.Part, ds *objDestSum) error {
	o := r.obj
	ps := rec.PartSize
	n := int((it.Size + ps - 1) / ps)
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var once sync.Once
	var first error
	fail := func(err error) {
		once.Do(func() { first = err })
		cancel(err)
		oh.abort()
	}
	var wg sync.WaitGroup
	mine := make(chan struct{}, o.streams)
	start := oh.offset()
dispatch:
	for k := 1; k <= n; k++ {
		off := int64(k-1) * ps
		size := min(ps, it.Size-off)
		prev, isDone := done[k]
		if isDone && off+size <= start {
			continue // sent and hashed before
		}
		if err := r.recheck(fctx); err != nil { // access revoked: stop before the next part
			fail(err)
			break
		}
		// Parts are read over the source's channels in turn (an SFTP channel moves at most
		// its 2 MiB window per round trip); an SSH destination's upload stripes them over its
		// channels likewise.
		sb := o.src.backend(i + k)
		select { // the file's parts in flight: its streams
		case mine <- struct{}{}:
		case <-fctx.Done():
			break dispatch
		}
		select { // the run's
		case o.parts <- struct{}{}:
		case <-fctx.Done():
			<-mine
			break dispatch
		}
		w := min(size, o.share)
		if err := o.mem.Acquire(fctx, w); err != nil {
			<-o.parts
			<-mine
			break
		}
		var rel sync.Once
		release := func() { rel.Do(func() { o.mem.Release(w); <-o.parts; <-mine }) }
		wg.Go(func() {
			r.copying.Add(1) // the slow-run watch counts time spent moving parts
			defer r.copying.Add(-1)
			buf := make([]byte, size)
			if err := r.readPart(fctx, sb, it.Source, versionETag(rec.SrcETag), off, buf); err != nil {
				release()
				fail(err)
				return
			}
			// A part's own SHA-256 goes with it to a bucket (the server checks it) and is
			// recorded to compare a part read again on resume. An SSH destination checks no
			// part digest and its source is a bucket, whose ETag names the version read (a
			// changed source restarts the file): its parts skip that hash pass, unless a
			// recorded part has a digest to compare.
			part := storage.Part{Number: k, Offset: off, Size: size}
			if !o.dst.sftp() || (isDone && len(prev.SHA256) > 0) {
				sum := sha256.Sum256(buf)
				part.SHA256 = sum[:]
			}
			if isDone {
				if len(prev.SHA256) > 0 && !bytes.Equal(prev.SHA256, part.SHA256) {
					release()
					fail(fmt.Errorf("%w: %s: part %d read again differs from the part sent", errSourceChanged, it.Source, k))
					return
				}
				part = prev
			} else if err := r.writePart(fctx, up, part, buf); err != nil {
				release()
				fail(err)
				return
			} else {
				partWritten(up, part)
				ds.partDone(k)
			}
			hoff, state := oh.add(off, buf, release)
			// The record in memory follows, so that a later round of this run resumes from it.
			o.mu.Lock()
			if !isDone {
				rec.Parts = append(rec.Parts, part)
			}
			if state != nil && hoff > rec.HashOff {
				rec.HashOff, rec.HashState = hoff, state
			}
			o.mu.Unlock()
			if isDone && state == nil {
				return
			}
			if !isDone {
				r.bytesDone.Add(size)
				r.e.metrics.bytesWritten.Add(float64(size))
				r.mu.Lock()
				it.BytesDone += size
				r.mu.Unlock()
			}
			if rec.transient {
				return
			}
			r.mu.Lock()
			bd := it.BytesDone
			r.mu.Unlock()
			st, err := r.e.db.partDone(context.WithoutCancel(ctx), &PartDoneParams{ID: r.t.ID, Seq: it.Seq, Part: part,
				BytesDone: bd, BytesRead: r.bytesRead.Load(), HashOff: hoff, HashState: state})
			if err != nil {
				fail(dbe(err))
				return
			}
			if st == StatusCanceled { // canceled through any instance
				r.cancel(errUserCanceled)
				fail(context.Cause(r.ctx))
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if got := oh.offset(); got != it.Size {
		return fmt.Errorf("%s: hashed %d of %d bytes", it.Source, got, it.Size)
	}
	return nil
}

// versionETag is the ETag a srcVersion names, "" for a version of size and time.
func versionETag(version string) string {
	etag, ok := strings.CutPrefix(version, "etag:")
	if !ok {
		return ""
	}
	return etag
}

// readPart reads len(buf) bytes of p at off; with etag, of that version only (else an error
// wrapping errSourceChanged), so that the parts of one file are all read from the version its
// upload record names, even if it changed and changed back meanwhile (which the Stat before
// the commit cannot see).
func (r *run) readPart(ctx context.Context, b storage.Backend, p, etag string, off int64, buf []byte) error {
	rc, err := b.Open(ctx, p, off, int64(len(buf)), etag)
	if errors.Is(err, storage.ErrChanged) {
		return fmt.Errorf("read %s: %w: %w", p, errSourceChanged, err)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	defer rc.Close()
	k, err := io.ReadFull(rc, buf)
	r.bytesRead.Add(int64(k))
	r.e.metrics.bytesRead.Add(float64(k))
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w: shorter than %d bytes", p, errSourceChanged, off+int64(len(buf)))
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	return nil
}

// writePart sends one part with its SHA-256; a part the server refuses (a corrupt part:
// BadDigest) is sent again, up to partTries times. A lost connection ends the round at once.
// An SSH destination gets no digest with the part (see objectParts): its backend could only
// hash the same buffer again in this process (SSH's MAC guards the bytes on the way, and the
// destination's own SHA-256 of the file is what verifies them on disk).
func (r *run) writePart(ctx context.Context, up storage.Upload, p storage.Part, buf []byte) error {
	for try := 1; ; try++ {
		err := up.WritePart(ctx, p.Number, p.Offset, bytes.NewReader(buf), p.Size, p.SHA256)
		if err == nil || ctx.Err() != nil || try >= partTries || isPermanent(err) || isConnErr(err) {
			return err
		}
		r.e.log.Info("transfer: part refused; sending it again", "id", r.t.ID, "part", p.Number, "err", err)
	}
}

// objectFinish checks a file whose parts are all sent (the source unchanged and, with sha256
// verification, its SHA-256 srcSum equal to the bytes sent), commits the upload, checks the server's
// composite checksum against the parts sent (and an SFTP destination's SHA-256: streamed by ds
// before the commit, else sha256sum after it), and marks the item done with its SHA-256.
// srcSum is the source's SHA-256 as its server knows it ("" when it keeps none).
func (r *run) objectFinish(ctx context.Context, i int, it *Item, rec *UploadRecord, up storage.Upload, sum, srcSum string, ds *objDestSum) error {
	o := r.obj
	sb, db := o.src.backend(i), o.dst.backend(i)
	se, err := sb.Stat(ctx, it.Source)
	if err != nil {
		return fmt.Errorf("source %s: %w", it.Source, err)
	}
	if srcVersion(se) != rec.SrcETag {
		if err := r.resetObject(ctx, db, it, rec); err != nil {
			return err
		}
		return fmt.Errorf("%s: %w; the file starts again", it.Source, errSourceChanged)
	}
	if r.t.Verify == VerifySHA256 {
		if want := srcSum; want != "" && want != sum {
			if err := r.resetObject(ctx, db, it, rec); err != nil {
				return err
			}
			return fmt.Errorf("%w: %s: the source's sha256 is %s, the bytes sent hash to %s", errMismatch, it.Source, want, sum)
		}
	}
	// The streamed sum ends before the commit: every part is written, and nothing writes to
	// the temporary file any more (see "Verifying an SSH destination" in object.go).
	streamed := ds.sum(ctx)
	e, err := up.Commit(ctx)
	if err != nil {
		return fmt.Errorf("commit %s: %w", it.Destination, err)
	}
	if !rec.transient {
		if err := r.forgetObject(ctx, it); err != nil {
			return err
		}
	}
	var sums [][]byte
	for _, p := range up.Parts() {
		sums = append(sums, p.SHA256)
	}
	var bad error
	verifiedBy := ""
	switch {
	case r.t.Verify != VerifyNone && e.Size != it.Size:
		bad = fmt.Errorf("%w: %s has %d bytes, want %d", errMismatch, it.Destination, e.Size, it.Size)
	case strings.HasSuffix(e.Checksum, fmt.Sprintf("-%d", len(sums))) && e.Checksum != storage.CompositeSHA256(sums):
		bad = fmt.Errorf("%w: %s: the server's composite checksum %s is not that of the parts sent (%s)", errMismatch,
			it.Destination, e.Checksum, storage.CompositeSHA256(sums))
	case e.Checksum != "" && !strings.Contains(e.Checksum, "-") && e.Checksum != b64hex(sum):
		bad = fmt.Errorf("%w: %s: the server's sha256 %s is not that of the bytes sent (%s)", errMismatch, it.Destination, e.Checksum, b64hex(sum))
	case r.t.Verify == VerifySHA256 && o.dst.sftp() && streamed == sum:
		verifiedBy = "streamed"
	case r.t.Verify == VerifySHA256 && o.dst.sftp():
		if streamed != "" {
			r.e.log.Info("transfer: the destination's streamed sha256 differs; hashing the file again", "id", r.t.ID,
				"file", it.Destination, "streamed", streamed, "sent", sum)
		}
		verifiedBy = "reread"
		d, err := o.dst.fss[i%len(o.dst.fss)].Checksum(ctx, it.Destination, "sha256")
		if err != nil {
			return fmt.Errorf("destination sha256 of %s: %w", it.Destination, err)
		}
		if d != sum {
			bad = fmt.Errorf("%w: %s: the destination's sha256 is %s, the bytes sent hash to %s", errMismatch, it.Destination, d, sum)
		}
	}
	if bad != nil {
		_ = db.Remove(context.WithoutCancel(ctx), it.Destination, false)
		r.resetBytes(it)
		return bad
	}
	if o.dst.sftp() {
		observeObject(it, up, verifiedBy)
	}
	r.itemDone(it, sum, false)
	return nil
}

// objectSum is the SHA-256 (hex) of file p at end ep as the server knows it: sha256sum over
// SSH, or an object's full-object checksum; "" when the server keeps none (a multipart object's
// is composite).
func (r *run) objectSum(ctx context.Context, ep *endpoint, p string) (string, error) {
	if ep.sftp() {
		s, err := ep.fss[0].Checksum(ctx, p, "sha256")
		if err != nil {
			return "", fmt.Errorf("sha256 of %s: %w", p, err)
		}
		return s, nil
	}
	e, err := ep.backend(0).Stat(ctx, p)
	if err != nil {
		return "", err
	}
	return fullSHA256(e), nil
}

// resetObject aborts the recorded upload of it and forgets its parts: the file starts again.
func (r *run) resetObject(ctx context.Context, b storage.Backend, it *Item, rec *UploadRecord) error {
	if rec.transient { // nothing on the server; the deferred Abort drops what the backend holds
		r.resetBytes(it)
		return nil
	}
	if err := r.e.abortUpload(context.WithoutCancel(ctx), b, r.t.ID, it.Seq, rec.Dst, rec.UploadID); err != nil {
		r.e.log.Warn("transfer: aborting an upload", "id", r.t.ID, "file", rec.Dst, "err", err)
		if err := r.forgetObject(ctx, it); err != nil {
			return err
		}
	}
	r.obj.mu.Lock()
	delete(r.obj.uploads, it.Seq)
	r.obj.mu.Unlock()
	r.resetBytes(it)
	return nil
}

// resetBytes takes it's finished bytes off the run's progress.
func (r *run) resetBytes(it *Item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bytesDone.Add(-it.BytesDone)
	it.BytesDone = 0
}

// forgetObject drops the upload record of it (committed, or aborted by a failed commit).
func (r *run) forgetObject(ctx context.Context, it *Item) error {
	r.obj.mu.Lock()
	delete(r.obj.uploads, it.Seq)
	r.obj.mu.Unlock()
	r.mu.Lock()
	it.staged = false
	r.mu.Unlock()
	return dbe(r.e.db.deleteUpload(context.WithoutCancel(ctx), r.t.ID, it.Seq))
}

// b64hex is a hex digest in base64, as S3 reports checksums.
func b64hex(h string) string {
	raw, err := hex.DecodeString(h)
	if err != nil {
		return h
	}
	return base64.StdEncoding.EncodeToString(raw)
}
