package transfer

import (
	"context"
	"sync"

	"github.com/sshapi/sshapi/internal/storage"
)

// objDestSum is the streamed SHA-256 of one file's temporary file on an SSH destination of an
// object run (see "Verifying an SSH destination" in object.go): the destsum.go command, fed a
// part once it is written and every part before it is.
type objDestSum struct {
	d       *destSum
	wg      sync.WaitGroup
	release func()
}

// startObjectDestSum starts the streamed sum of file it, written through upload up in parts of
// ps bytes of which done are on the server already, or returns nil: when the transfer does not
// verify with sha256, the destination is not an SSH system, the file has one part (hashing it
// after the commit costs as much as starting a stream), its parts do not fall on dd blocks, or
// the run has maxDestSums streams open already.
func (r *run) startObjectDestSum(ctx context.Context, it *Item, up storage.Upload, ps int64, done map[int]storage.Part) *objDestSum {
	o := r.obj
	s, ok := up.(stripedUpload)
	block := destSumBlock(ps)
	if r.t.Verify != VerifySHA256 || !o.dst.sftp() || !ok || ps <= 0 || it.Size <= ps || block == 0 {
		return nil
	}
	select {
	case o.sums <- struct{}{}:
	default:
		return nil
	}
	ods := &objDestSum{release: func() { <-o.sums }}
	ods.d = &destSum{r: r, it: it, tmp: s.RemoteTempFile(), block: block, part: ps, n: int((it.Size + ps - 1) / ps),
		wg: &ods.wg, ready: map[int]bool{}, started: make(chan struct{}), exited: make(chan struct{}),
		out: limitedBuffer{max: 4 << 10}}
	for k := range done {
		ods.d.ready[k-1] = true
	}
	ods.wg.Go(func() { ods.d.start(ctx) })
	return ods
}

// partDone tells the sum that part k (from 1) is written.
func (s *objDestSum) partDone(k int) {
	if s != nil {
		s.d.rangeDone(k - 1)
	}
}

// sum ends the stream and returns its digest, or "" when there is none to trust (see
// destSum.sum). Unlike the SFTP path's, it waits for a command still starting: the only other
// way to the destination's sum is a command that reads the whole file after the commit.
func (s *objDestSum) sum(ctx context.Context) string {
	if s == nil {
		return ""
	}
	select {
	case <-s.d.started:
	case <-ctx.Done():
		return ""
	}
	return s.d.sum(ctx, s.d.r.e.cfg.CommandTimeout)
}

// close ends the command, waits for its goroutines and gives the run's slot back.
func (s *objDestSum) close() {
	if s == nil {
		return
	}
	s.d.close()
	s.wg.Wait()
	s.release()
}
