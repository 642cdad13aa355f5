package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/confine"
)

// setup resolves both systems, opens the first stream, plans the transfer if it has no items
// yet, loads the items and finished ranges, and chooses the number of streams. It works under
// the ends' holds; if one is lost it stops there with that as its error (execute retries).
func (r *run) setup(ctx context.Context) (err error) {
	if r.src, err = r.e.resolve(ctx, r.t.Owner, r.t.Source, false); err != nil {
		return fmt.Errorf("source system %q: %w", r.t.Source.System, err)
	}
	if r.dst, err = r.e.resolve(ctx, r.t.Owner, r.t.Destination, true); err != nil {
		return fmt.Errorf("destination system %q: %w", r.t.Destination.System, err)
	}
	parent := ctx
	ctx, release, err := r.hold(parent)
	if err != nil {
		return err
	}
	defer release()
	defer func() {
		if lost := lostHold(parent, ctx); lost != nil {
			err = lost // not the database error a canceled query looks like
		}
	}()
	if r.isObject() {
		return r.setupObject(ctx)
	}
	r.srcR = runner{pool: r.e.pool, t: r.src.Target, maxOutput: r.e.cfg.HelperOutputBytes}
	r.dstR = runner{pool: r.e.pool, t: r.dst.Target, maxOutput: r.e.cfg.HelperOutputBytes}
	r.closeStreams()
	r.streams = []*stream{{r: r}}
	sc, dc, err := r.streams[0].clients(ctx)
	if err != nil {
		return err
	}
	// The round-trip time that picks the stream count is measured while the roots are checked
	// and the transfer is planned, not before.
	var rtt time.Duration
	var probe sync.WaitGroup
	if r.t.streamsReq == 0 && !r.t.SameSystem {
		probe.Go(func() { rtt = pathRTT(sc, dc) })
	}
	defer probe.Wait()
	if err := r.setupRoots(ctx, sc, dc); err != nil {
		return err
	}
	r.walk = nil
	if !r.t.planned {
		w, items, err := r.plan(ctx, sc, dc)
		if err != nil {
			return err
		}
		if w == nil {
			if err := r.e.db.plan(ctx, r.t.ID, items, 0); err != nil {
				return dbe(err)
			}
			r.t.planned = true
		}
		r.walk = w
	}
	items, err := r.e.db.items(ctx, r.t.ID, -1, 0, "")
	if err != nil {
		return dbe(err)
	}
	ranges, err := r.e.db.ranges(ctx, r.t.ID)
	if err != nil {
		return dbe(err)
	}
	loaded := make([]*Item, len(items))
	var total, done, files, filesDone, failed, skipped int64
	for i := range items {
		it := &items[i]
		loaded[i] = it
		if it.Kind != KindFile {
			continue
		}
		files++
		total += it.Size
		switch it.Status {
		case ItemDone:
			filesDone++
			done += it.Size
		case ItemSkipped:
			filesDone++
			skipped++
			done += it.Size
		case ItemFailed:
			failed++
		case ItemPending:
			for idx := range ranges[it.Seq] {
				done += r.rangeLen(it, idx)
			}
		}
	}
	r.mu.Lock()
	r.items, r.ranges = loaded, ranges
	r.mu.Unlock()
	r.bytesTotal.Store(total)
	r.bytesDone.Store(done)
	r.filesTotal.Store(files)
	r.filesDone.Store(filesDone)
	r.filesFailed.Store(failed)
	r.filesSkipped.Store(skipped)
	if r.walk != nil && !r.streamPlan() {
		// Planned whole before anything moves (see streamPlan), under this setup's hold.
		if err := r.walkPlan(ctx, sc, nil); err != nil {
			return err
		}
		r.walk = nil
	}

	probe.Wait()
	n := r.t.streamsReq
	if n == 0 {
		n = r.autoStreams(rtt)
	}
	if r.t.SameSystem {
		n = 1
	}
	r.nstreams.Store(int64(n))
	for len(r.streams) < n {
		r.streams = append(r.streams, &stream{r: r})
	}
	if !r.t.SameSystem {
		// As many further streams as there are ranges left for them to take at once (in the
		// background, past this setup's holds: opening channels relies on no path).
		r.warmStreams(parent, int(min(int64(n-1), (total-done)/r.t.ChunkSize)))
	}
	r.e.log.Info("transfer planned", "id", r.t.ID, "files", files, "bytes", total, "bytes_done", done, "streams", n)
	return nil
}

// pathRTT is the larger of the round-trip times to the source and the destination, measured at
// once.
func pathRTT(sc, dc *sftp.Client) time.Duration {
	var srtt time.Duration
	var wg sync.WaitGroup
	wg.Go(func() { srtt = measureRTT(sc) })
	drtt := measureRTT(dc)
	wg.Wait()
	return max(srtt, drtt)
}

// autoStreams picks the stream count from the measured round-trip time rtt: enough 2 MiB windows
// to fill the bandwidth-delay product of the assumed link rate.
func (r *run) autoStreams(rtt time.Duration) int {
	n := int(math.Ceil(r.e.cfg.LinkRate * rtt.Seconds() / float64(channelWindow)))
	n = max(r.e.cfg.MinStreams, min(n, r.e.cfg.MaxStreams))
	r.e.log.Info("transfer streams chosen from RTT", "id", r.t.ID, "rtt", rtt, "streams", n)
	return n
}

// channelWindow is the SSH channel window of x/crypto/ssh and OpenSSH: one channel moves at most
// this much per round trip.
const channelWindow = 2 << 20

// measureRTT returns the fastest of a few SFTP round trips.
func measureRTT(c *sftp.Client) time.Duration {
	best := time.Duration(math.MaxInt64)
	for range 3 {
		t0 := time.Now()
		if _, err := c.RealPath("."); err != nil {
			return time.Millisecond
		}
		best = min(best, time.Since(t0))
	}
	return best
}

// rangeLen is the length of range idx of it.
func (r *run) rangeLen(it *Item, idx int) int64 {
	off := int64(idx) * r.t.ChunkSize
	return max(0, min(r.t.ChunkSize, it.Size-off))
}

// pending returns the items still to do.
func (r *run) pending() []*Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Item
	for _, it := range r.items {
		if it.Status == ItemPending {
			out = append(out, it)
		}
	}
	return out
}

// plan judges the transfer's source and destination: a file's plan is its one item; a
// directory's is a walk (planWalk), which stores its items a chunk at a time.
func (r *run) plan(ctx context.Context, sc, dc *sftp.Client) (*planWalk, []Item, error) {
	srcAbs, err := r.srcRoot.Resolve(ctx, sc, r.t.Source.Path, true)
	if err != nil {
		return nil, nil, confined(fmt.Errorf("source: %w", err))
	}
	dstAbs, err := r.dstRoot.Resolve(ctx, dc, r.t.Destination.Path, true)
	if err != nil {
		return nil, nil, confined(fmt.Errorf("destination: %w", err))
	}
	fi, err := sc.Stat(srcAbs)
	if err != nil {
		return nil, nil, fmt.Errorf("source %s: %w", srcAbs, err)
	}
	dfi, derr := dc.Stat(dstAbs)
	if derr != nil && !errors.Is(derr, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("destination %s: %w", dstAbs, derr)
	}
	dstExists := derr == nil
	switch {
	case fi.Mode().IsRegular():
		dst := dstAbs
		if strings.HasSuffix(r.t.Destination.Path, "/") || (dstExists && dfi.IsDir()) {
			dst = path.Join(dstAbs, path.Base(srcAbs))
		}
		if r.t.SameSystem && dst == srcAbs {
			return nil, nil, permanent(fmt.Errorf("destination %s is the source file", dst))
		}
		return nil, []Item{fileItem(0, srcAbs, dst, fi)}, nil
	case fi.IsDir():
		if !r.t.Recursive {
			return nil, nil, permanent(fmt.Errorf("source %s is a directory: set recursive to copy it", srcAbs))
		}
		if dstExists && !dfi.IsDir() {
			return nil, nil, permanent(fmt.Errorf("destination %s exists and is not a directory", dstAbs))
		}
		if r.t.SameSystem && confine.Within(srcAbs, dstAbs) {
			return nil, nil, permanent(fmt.Errorf("destination %s is inside the source %s", dstAbs, srcAbs))
		}
		return &planWalk{src: srcAbs, dst: dstAbs}, nil, nil
	}
	return nil, nil, permanent(fmt.Errorf("source %s is not a regular file or directory", srcAbs))
}

func fileItem(seq int64, src, dst string, fi os.FileInfo) Item {
	return Item{Seq: seq, Kind: KindFile, Source: src, Destination: dst, Size: fi.Size(), Status: ItemPending,
		mtime: fi.ModTime().Unix(), mode: uint32(fi.Mode().Perm())}
}

// planWalk is a directory tree still to be planned: its items are found by walking src and
// stored a chunk at a time (walkPlan), each chunk before any of its items moves.
type planWalk struct {
	src, dst string // absolute roots at the source and the destination
}

// planChunk is how many items walkPlan stores (one transaction) and hands on first: a small tar
// batch's worth, so that the first batch can start as soon as its files are stored. Each next
// chunk is twice as large, up to planChunkMax (see tarsmall.go on batch size).
func (r *run) planChunk() int { return tarBatchFactor * r.e.cfg.BatchFiles }

// planChunkMax is the most items walkPlan stores and hands on at a time: a full tar batch.
func (r *run) planChunkMax() int { return tarBatchMaxFactor * r.e.cfg.BatchFiles }

// streamPlan reports whether this run copies a directory's first chunks while it walks the rest
// (planRound). Not with a shared end: its walk and rounds each hold the owner's guard, and a run
// plans under setup's hold and then rounds chunk by chunk, as before; nor on one system (one cp
// batch per round on the server).
func (r *run) streamPlan() bool {
	return r.src.Hold == nil && r.dst.Hold == nil && !r.t.SameSystem
}

// errPlanTooLarge is wrapped by the (permanent) error of a plan beyond its limits.
var errPlanTooLarge = errors.New("transfer plan too large")

// walkPlan walks r.walk's tree (not following symlinks; directories before their contents) and
// stores as items, a chunk at a time (planChunk, growing to planChunkMax) and each chunk in one
// transaction, the entries no stored item has as its source — a run resuming an interrupted walk keeps what it stored (and what was
// done with it) and adds only what the interrupted walk had not reached, so no file is planned
// twice or left out. Each stored chunk joins r.items and is handed to emit (when set). The last
// chunk marks the transfer planned. The plan's items and path bytes, stored ones included, stay
// within transfer.max_plan_items and transfer.max_plan_path_bytes: crossing either is a
// permanent error naming it, returned as soon as it is crossed.
func (r *run) walkPlan(ctx context.Context, sc *sftp.Client, emit func(chunk []*Item) error) error {
	w := r.walk
	lim := planLimits{items: r.e.cfg.MaxPlanItems, pathBytes: r.e.cfg.MaxPlanPathBytes}
	r.mu.Lock()
	stored := make(map[string]struct{}, len(r.items))
	var next, pathBytes int64
	for _, it := range r.items {
		stored[it.Source] = struct{}{}
		next = max(next, it.Seq+1)
		pathBytes += int64(len(it.Source) + len(it.Destination))
	}
	count := len(r.items)
	r.mu.Unlock()
	n := r.planChunk()
	chunk := make([]Item, 0, n)
	flush := func(final bool) error {
		// Stored planChunk items per transaction even when the chunk is larger: a longer
		// transaction would hold SQLite's one connection long enough under load to delay the
		// run's heartbeat past its lease. A run stopped between them leaves part of the chunk
		// stored, which the next walk keeps (and does not plan again) like any stored chunk.
		for start := 0; start == 0 || start < len(chunk); start += r.planChunk() {
			part := chunk[start:min(start+r.planChunk(), len(chunk))]
			if err := r.e.db.appendItems(ctx, r.t.ID, part, final && start+len(part) == len(chunk)); err != nil {
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return dbe(err)
			}
		}
		ptrs := make([]*Item, len(chunk))
		var files, bytes int64
		for i := range chunk {
			ptrs[i] = &chunk[i]
			if chunk[i].Kind == KindFile {
				files++
				bytes += chunk[i].Size
			}
		}
		r.mu.Lock()
		r.items = append(r.items, ptrs...)
		r.mu.Unlock()
		r.filesTotal.Add(files)
		r.bytesTotal.Add(bytes)
		if final {
			r.t.planned = true
		}
		n = min(2*n, r.planChunkMax())
		chunk = make([]Item, 0, n)
		if emit != nil && len(ptrs) > 0 {
			return emit(ptrs)
		}
		return nil
	}
	err := walkTree(ctx, sc, w.src, w.dst, func(it Item) error {
		if _, ok := stored[it.Source]; ok {
			return nil
		}
		if count >= lim.items {
			return permanent(fmt.Errorf("%w: %s has more than %d files, directories and symlinks (transfer.max_plan_items); transfer parts of it separately",
				errPlanTooLarge, w.src, lim.items))
		}
		if pathBytes += int64(len(it.Source) + len(it.Destination)); pathBytes > lim.pathBytes {
			return permanent(fmt.Errorf("%w: the paths under %s exceed %d bytes (transfer.max_plan_path_bytes); transfer parts of it separately",
				errPlanTooLarge, w.src, lim.pathBytes))
		}
		count++
		it.Seq = next
		next++
		chunk = append(chunk, it)
		if len(chunk) >= n {
			return flush(false)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush(true)
}

// planLimits bound one plan: its items, and the bytes of their source and destination paths.
type planLimits struct {
	items     int
	pathBytes int64
}

// walkTree calls fn with an item (its Seq unset) for every directory, regular file and symlink
// under srcRoot, srcRoot included, not following symlinks, directories before their contents;
// the items' destinations are under dstRoot. An error of fn ends the walk and is returned.
func walkTree(ctx context.Context, sc *sftp.Client, srcRoot, dstRoot string, fn func(Item) error) error {
	w := sc.Walk(srcRoot)
	for w.Step() {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if err := w.Err(); err != nil {
			return fmt.Errorf("walk %s: %w", w.Path(), err)
		}
		p, fi := w.Path(), w.Stat()
		dst := dstRoot
		if p != srcRoot {
			dst = path.Join(dstRoot, strings.TrimPrefix(p, srcRoot+"/"))
		}
		var it Item
		switch {
		case fi.IsDir():
			it = Item{Kind: KindDir, Source: p, Destination: dst, Status: ItemPending, mode: uint32(fi.Mode().Perm())}
		case fi.Mode().IsRegular():
			it = fileItem(0, p, dst, fi)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := sc.ReadLink(p)
			if err != nil {
				return fmt.Errorf("read link %s: %w", p, err)
			}
			it = Item{Kind: KindSymlink, Source: p, Destination: dst, Status: ItemPending, linkTarget: target}
		default:
			continue
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}
