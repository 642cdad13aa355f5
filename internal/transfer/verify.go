package transfer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/digest"
)

// itemSkipped marks it skipped by the sync level.
func (r *run) itemSkipped(it *Item, sum string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	it.Status, it.Error, it.SHA256 = ItemSkipped, "", sum
	if it.Kind == KindFile {
		it.BytesDone = it.Size
		r.filesSkipped.Add(1)
		r.filesDone.Add(1)
		r.bytesDone.Add(it.Size)
	}
}

// syncCheck skips the files the sync level says are already at the destination. Files with
// finished ranges are past that decision.
func (r *run) syncCheck(ctx context.Context, files []*Item) error {
	var cand []*Item
	r.mu.Lock()
	for _, it := range files {
		if !r.checked[it.Seq] && len(r.ranges[it.Seq]) == 0 {
			cand = append(cand, it)
			r.checked[it.Seq] = true
		}
	}
	r.mu.Unlock()
	if len(cand) == 0 {
		return nil
	}
	stats := make([]os.FileInfo, len(cand))
	forEach(cand, 32, func(i int, it *Item) {
		_, dc, err := r.streams[i%len(r.streams)].clients(ctx)
		if err != nil {
			return
		}
		if fi, err := dc.Stat(it.Destination); err == nil && fi.Mode().IsRegular() {
			stats[i] = fi
		}
	})
	var skip, sumCand []*Item
	for i, it := range cand {
		fi := stats[i]
		if fi == nil {
			continue
		}
		switch r.t.Sync {
		case SyncExists:
			skip = append(skip, it)
		case SyncSize:
			if fi.Size() == it.Size {
				skip = append(skip, it)
			}
		case SyncMtime:
			if fi.Size() == it.Size && fi.ModTime().Unix() == it.mtime {
				skip = append(skip, it)
			}
		case SyncChecksum:
			if fi.Size() == it.Size {
				sumCand = append(sumCand, it)
			}
		}
	}
	for _, it := range skip {
		r.itemSkipped(it, "")
	}
	if len(sumCand) > 0 {
		srcSums, dstSums, _, err := r.sums(ctx, sumCand, func(it *Item) string { return it.Destination })
		if err == nil {
			for _, it := range sumCand {
				if s := srcSums[it.Source]; s != "" && s == dstSums[it.Destination] {
					r.itemSkipped(it, s)
					skip = append(skip, it)
				}
			}
		}
	}
	return r.save(ctx, skip)
}

// sums computes sha256 of the items' sources and of dstPath(item) at the destination, both at
// once. Paths that could not be read are missing from the maps, with their errors in errs.
func (r *run) sums(ctx context.Context, items []*Item, dstPath func(*Item) string) (src, dst map[string]string, errs map[string]error, err error) {
	srcFiles := make([]digest.File, len(items))
	var dstFiles []digest.File
	streamed := map[*Item]string{} // destination sums streamed while copying
	for i, it := range items {
		srcFiles[i] = digest.File{Path: it.Source, Size: it.Size}
		if s := r.takeDestSum(dstPath(it)); s != "" {
			streamed[it] = s
		} else {
			dstFiles = append(dstFiles, digest.File{Path: dstPath(it), Size: it.Size})
		}
	}
	var srcErrs, dstErrs map[string]error
	var serr, derr error
	var wg sync.WaitGroup
	wg.Go(func() { src, srcErrs, serr = r.sourceSHA256(ctx, srcFiles) })
	wg.Go(func() { dst, dstErrs, derr = sha256Batch(ctx, r.dstR, dstFiles, r.e.cfg.CommandTimeout) })
	wg.Wait()
	if err := errors.Join(serr, derr); err != nil {
		return nil, nil, nil, err
	}
	// A streamed sum counts only when it equals the source's; the others are hashed again.
	var again []digest.File
	for it, s := range streamed {
		if s == src[it.Source] {
			dst[dstPath(it)] = s
		} else {
			again = append(again, digest.File{Path: dstPath(it), Size: it.Size})
		}
	}
	if len(again) > 0 {
		r.e.log.Info("transfer: streamed destination sum differs from the source's; hashing again", "id", r.t.ID, "files", len(again))
		more, moreErrs, err := sha256Batch(ctx, r.dstR, again, r.e.cfg.CommandTimeout)
		if err != nil {
			return nil, nil, nil, err
		}
		maps.Copy(dst, more)
		maps.Copy(dstErrs, moreErrs)
	}
	errs = map[string]error{}
	for p, e := range srcErrs {
		errs["src:"+p] = e
	}
	for p, e := range dstErrs {
		errs["dst:"+p] = e
	}
	return src, dst, errs, nil
}

// verify checks copied temporary files against their sources as the transfer's Verify says. It
// returns each failed item's error; verified items get their sha256 in sums.
func (r *run) verify(ctx context.Context, s *stream, items []*Item) (map[*Item]error, map[*Item]string) {
	errs := map[*Item]error{}
	sums := map[*Item]string{}
	if len(items) == 0 {
		return errs, sums
	}
	tmp := func(it *Item) string { return tempName(it.Destination, r.t.ID) }
	switch r.t.Verify {
	case VerifyNone:
	case VerifySize:
		_, dc, err := s.clients(ctx)
		for _, it := range items {
			if err != nil {
				errs[it] = err
				continue
			}
			fi, serr := dc.Stat(tmp(it))
			switch {
			case serr != nil:
				errs[it] = fmt.Errorf("verify %s: %w", tmp(it), serr)
			case fi.Size() != it.Size:
				errs[it] = fmt.Errorf("%w: %s has %d bytes, source %d", errMismatch, tmp(it), fi.Size(), it.Size)
			}
		}
	case VerifySHA256:
		src, dst, perr, err := r.sums(ctx, items, tmp)
		for _, it := range items {
			switch {
			case err != nil:
				errs[it] = fmt.Errorf("verify: %w", err)
			case src[it.Source] == "":
				errs[it] = fmt.Errorf("verify source: %w", perr["src:"+it.Source])
			case dst[tmp(it)] == "":
				// The temporary file is gone or unreadable: not the source's fault, so retry.
				errs[it] = fmt.Errorf("%w: %s: %v", errMismatch, tmp(it), perr["dst:"+tmp(it)])
			case src[it.Source] != dst[tmp(it)]:
				errs[it] = fmt.Errorf("%w: sha256 of %s is %s at the source, %s at the destination", errMismatch, it.Source, src[it.Source], dst[tmp(it)])
			default:
				sums[it] = src[it.Source]
			}
		}
	}
	return errs, sums
}

// attrsDone says which of a temporary file's final attributes were set when it was written.
type attrsDone uint8

// Attributes a tar batch sets as it writes a file.
const (
	doneTimes attrsDone = 1 << iota // modification time
	doneMode                        // permission bits
)

// finalize sets mode and modification time on it's temporary file (unless cp -p did, or done
// says they are set) and renames it into place.
func (r *run) finalize(ctx context.Context, s *stream, it *Item, setAttrs bool, done attrsDone) error {
	_, dc, err := s.clients(ctx)
	if err != nil {
		return err
	}
	tmp := tempName(it.Destination, r.t.ID)
	if setAttrs {
		// The mode and the times are set at once (one round trip instead of two); the rename
		// waits for both.
		var modeErr, timesErr error
		var wg sync.WaitGroup
		if done&doneMode == 0 {
			wg.Go(func() { modeErr = dc.Chmod(tmp, os.FileMode(it.mode)) })
		}
		if done&doneTimes == 0 {
			mt := time.Unix(it.mtime, 0)
			timesErr = dc.Chtimes(tmp, mt, mt)
		}
		wg.Wait()
		if modeErr != nil {
			return fmt.Errorf("chmod %s: %w", tmp, modeErr)
		}
		if timesErr != nil {
			return fmt.Errorf("set times of %s: %w", tmp, timesErr)
		}
	}
	if err := dc.PosixRename(tmp, it.Destination); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, it.Destination, err)
	}
	return nil
}

// verifyAndFinalize verifies items' temporary files and renames the good ones into place; those
// in done have those attributes already (a tar batch wrote them). It returns the verification
// errors.
func (r *run) verifyAndFinalize(ctx context.Context, s *stream, items []*Item, addBytes bool, done map[*Item]attrsDone) map[*Item]error {
	setAttrs := !r.t.SameSystem
	items, fusedErrs := r.verifyRenameStreamed(ctx, items, addBytes, setAttrs, done)
	errs, sums := r.verify(ctx, s, items)
	maps.Copy(errs, fusedErrs)
	var rest, quick []*Item
	for _, it := range items {
		switch {
		case errs[it] != nil:
			r.itemFailed(ctx, it, errs[it])
		case r.dstR.pool != nil && !r.renameOff.Load() && batchRenamable(setAttrs, done[it]):
			quick = append(quick, it)
		default:
			rest = append(rest, it)
		}
	}
	if len(quick) < renameBatchMin {
		rest, quick = append(rest, quick...), nil
	}
	if len(quick) > 0 {
		renamed, rerrs, err := r.renameBatch(ctx, quick)
		if err != nil && ctx.Err() == nil {
			r.e.log.Info("transfer: batch rename incomplete; the rest is renamed over SFTP", "id", r.t.ID, "files", len(quick), "err", err)
		}
		for i, it := range quick {
			switch {
			case renamed[i]:
				r.e.metrics.renamed.Inc()
				r.itemDone(it, sums[it], addBytes)
			case rerrs[i] != nil:
				r.itemFailed(ctx, it, rerrs[i])
			default:
				rest = append(rest, it)
			}
		}
	}
	forEach(rest, finalizeConcurrency, func(_ int, it *Item) {
		if err := r.finalize(ctx, s, it, setAttrs, done[it]); err != nil {
			s.fail(err)
			r.itemFailed(ctx, it, err)
			return
		}
		r.itemDone(it, sums[it], addBytes)
	})
	return errs
}

// verifyRenameStreamed verifies and renames, with one destination command (verifyRenameBatch),
// those of items that a tar batch wrote with every attribute set and whose sources' sums came
// from its stream. It returns the other items, left to verify and finalize (among them any the
// command did not judge, with their streamed sums put back), and the verification errors of
// the items it judged.
func (r *run) verifyRenameStreamed(ctx context.Context, items []*Item, addBytes, setAttrs bool, done map[*Item]attrsDone) ([]*Item, map[*Item]error) {
	errs := map[*Item]error{}
	if r.t.Verify != VerifySHA256 || r.dstR.pool == nil || r.renameOff.Load() || r.verifyRenameOff.Load() {
		return items, errs
	}
	var fused, rest []*Item
	var srcSums []string
	for _, it := range items {
		if batchRenamable(setAttrs, done[it]) {
			if sum, ok := r.tarSums.LoadAndDelete(it.Source); ok {
				fused, srcSums = append(fused, it), append(srcSums, sum.(string))
				continue
			}
		}
		rest = append(rest, it)
	}
	if len(fused) < renameBatchMin {
		for i, it := range fused {
			r.tarSums.Store(it.Source, srcSums[i])
		}
		return items, errs
	}
	renamed, ferrs, err := r.verifyRenameBatch(ctx, fused, srcSums)
	if err != nil && ctx.Err() == nil {
		r.e.log.Info("transfer: batch verify and rename incomplete; the rest is verified by sha256sum", "id", r.t.ID, "files", len(fused), "err", err)
	}
	for i, it := range fused {
		switch {
		case renamed[i]:
			r.e.metrics.renamed.Inc()
			r.itemDone(it, srcSums[i], addBytes)
		case ferrs[i] != nil:
			errs[it] = ferrs[i]
			r.itemFailed(ctx, it, ferrs[i])
		default:
			r.tarSums.Store(it.Source, srcSums[i])
			rest = append(rest, it)
		}
	}
	return rest, errs
}

// finalizeConcurrency bounds the renames (and chmods) in flight per batch: each is one SFTP
// request, pipelined on the stream's channel, so many at once hide the round trips.
const finalizeConcurrency = 64
