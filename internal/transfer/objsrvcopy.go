package transfer

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sshapi/sshapi/internal/storage"
)

// Server-side copies between buckets. When both ends of an object run are buckets of one S3
// server reached with one credential (storage.CrossCopier), a file is copied on the server
// (CopyObject, UploadPartCopy above 5 GiB), conditional on the source version the run read
// (its ETag), instead of downloaded and uploaded again. The copy is verified as any file:
// its size, and with sha256 the copy's SHA-256 against the source's. The server computes the
// copy's from the bytes it wrote (x-amz-checksum-algorithm on the copy); the source's is the
// full-object SHA-256 the server keeps when it has one, else the source is read once and
// hashed while the server copies it (a multipart object only has a composite checksum), and
// the source must still be the version copied afterwards (same ETag: the copy was conditional
// on it). A copy without a server SHA-256 (above 5 GiB: composite) is read
// back and hashed too. A mismatch removes the copy and the file is tried again like any other.

// objectServerCopy copies file it (source entry se) on the server when the ends allow it. It
// reports false, having done nothing, when they do not. A source without a full-object
// SHA-256 is read and hashed while the server copies it.
func (r *run) objectServerCopy(ctx context.Context, i int, it *Item, se *storage.Entry) (bool, error) {
	o := r.obj
	sb, db := o.src.backend(i), o.dst.backend(i)
	cc, ok := db.(storage.CrossCopier)
	if !ok || o.src.sftp() || !cc.CanCopyFrom(sb) {
		return false, nil
	}
	r.copying.Add(1) // the slow-run watch counts time spent moving data
	defer r.copying.Add(-1)
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcSum, srcErr := fullSHA256(se), error(nil)
	var wg sync.WaitGroup
	if r.t.Verify == VerifySHA256 && srcSum == "" {
		wg.Go(func() { srcSum, srcErr = r.hashObject(hctx, sb, it.Source, se.ETag, se.Size) })
	}
	e, _, err := cc.CopyFrom(ctx, sb, it.Source, it.Destination, se.ETag)
	if err != nil {
		cancel()
	}
	wg.Wait()
	switch {
	case errors.Is(err, storage.ErrChanged):
		return true, fmt.Errorf("%s: %w", it.Source, errSourceChanged)
	case err != nil:
		return true, fmt.Errorf("server-side copy %s: %w", it.Source, err)
	}
	sum, err := r.verifyServerCopy(ctx, i, it, se, e, srcSum, srcErr)
	if err != nil {
		_ = db.Remove(context.WithoutCancel(ctx), it.Destination, false)
		return true, err
	}
	r.itemDone(it, sum, true)
	return true, nil
}

// verifyServerCopy checks copy e of source se as the transfer's verification says and returns
// the file's SHA-256 ("" without sha256 verification). srcSum is the source's (read while it
// was copied, with the read's error srcErr, when the server keeps none).
func (r *run) verifyServerCopy(ctx context.Context, i int, it *Item, se, e *storage.Entry, srcSum string, srcErr error) (string, error) {
	o := r.obj
	if r.t.Verify != VerifyNone && e.Size != se.Size {
		return "", fmt.Errorf("%w: %s has %d bytes, want %d", errMismatch, it.Destination, e.Size, se.Size)
	}
	if r.t.Verify != VerifySHA256 {
		return "", nil
	}
	if srcErr != nil {
		return "", srcErr
	}
	dstSum := fullSHA256(e)
	if dstSum == "" { // a copy in parts: read back
		var err error
		if dstSum, err = r.hashObject(ctx, o.dst.backend(i), it.Destination, e.ETag, e.Size); err != nil {
			return "", err
		}
	}
	if fullSHA256(se) == "" { // read: it must have been the version copied
		now, err := o.src.backend(i).Stat(ctx, it.Source)
		if err != nil {
			return "", fmt.Errorf("source %s: %w", it.Source, err)
		}
		if now.ETag != se.ETag {
			return "", fmt.Errorf("%s: %w", it.Source, errSourceChanged)
		}
	}
	if srcSum != dstSum {
		return "", fmt.Errorf("%w: %s: the source's sha256 is %s, the server-side copy's %s", errMismatch, it.Destination, srcSum, dstSum)
	}
	return srcSum, nil
}

// hashObject reads file p of b (size bytes; version etag when not empty, see readPart) and
// returns its SHA-256 (hex): ranged reads of the transfer's chunk size, as many at once as the
// run moves parts of one file and within its memory share (a single stream would be bound by
// one TCP window on a long path), hashed in order (orderedHash).
func (r *run) hashObject(ctx context.Context, b storage.Backend, p, etag string, size int64) (string, error) {
	o := r.obj
	ps := max(r.t.ChunkSize, 1)
	oh, _ := newOrderedHash(0, nil)
	ctx, cancel := context.WithCancelCause(ctx)
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
dispatch:
	for off := int64(0); off < size; off += ps {
		n := min(ps, size-off)
		select {
		case mine <- struct{}{}:
		case <-ctx.Done():
			break dispatch
		}
		select {
		case o.parts <- struct{}{}:
		case <-ctx.Done():
			<-mine
			break dispatch
		}
		w := min(n, o.share)
		if err := o.mem.Acquire(ctx, w); err != nil {
			<-o.parts
			<-mine
			break
		}
		var rel sync.Once
		release := func() { rel.Do(func() { o.mem.Release(w); <-o.parts; <-mine }) }
		wg.Go(func() {
			buf := make([]byte, n)
			if err := r.readPart(ctx, b, p, etag, off, buf); err != nil {
				release()
				fail(err)
				return
			}
			oh.add(off, buf, release)
		})
	}
	wg.Wait()
	switch {
	case first != nil:
		return "", first
	case ctx.Err() != nil:
		return "", context.Cause(ctx)
	case oh.offset() != size:
		return "", fmt.Errorf("%s: hashed %d of %d bytes", p, oh.offset(), size)
	}
	return oh.sum(), nil
}

// fullSHA256 is the hex SHA-256 of the whole file that the server keeps for e, or "" (none, or
// a multipart object's composite checksum).
func fullSHA256(e *storage.Entry) string {
	if e.Checksum == "" || strings.Contains(e.Checksum, "-") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(e.Checksum)
	if err != nil || len(raw) != sha256.Size {
		return ""
	}
	return hex.EncodeToString(raw)
}
