package api

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/slot"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// readAheadBuffers takes the chunk buffers of a download of size bytes over one channel: one
// from the download budget, waiting at most BudgetWait, and, for a file larger than one, a
// second where the owner's share has it at once, so that the next chunk is read over SFTP while
// the last one is sent. It returns them with the function that gives them back.
func (s *Server) readAheadBuffers(ctx context.Context, size int64) ([][]byte, func(), error) {
	n := int64(s.cfg.DownloadBufferBytes)
	wctx, cancel := s.budgetCtx(ctx)
	lease, err := s.downloads.Acquire(wctx, shareOwner(ctx), n)
	cancel()
	if err != nil {
		return nil, nil, errBusy("download buffers", err)
	}
	bufs := [][]byte{chunkBuffer(n)}
	var second *slot.Lease
	if size > n {
		if second, err = s.downloads.TryAcquire(shareOwner(ctx), n); err == nil {
			bufs = append(bufs, chunkBuffer(n))
		}
	}
	return bufs, func() {
		putChunkBuffers(bufs)
		lease.Release()
		second.Release()
	}, nil
}

// chunkBuffer returns a buffer of size bytes from chunkPool, or a new one.
func chunkBuffer(size int64) []byte {
	if b, _ := chunkPool.Get().(*[]byte); b != nil && int64(len(*b)) == size {
		return *b
	}
	return make([]byte, size)
}

// putChunkBuffers gives bufs back to chunkPool.
func putChunkBuffers(bufs [][]byte) {
	for _, b := range bufs {
		chunkPool.Put(&b)
	}
}

// uploadChunks takes the chunk buffers of an upload of size bytes (-1: unknown) over one
// channel from the download budget, without waiting: files.StripeChunksPerChannel buffers of
// DownloadBufferBytes, so that the body is read a chunk at a time straight into them (a few
// read(2) calls per chunk, no further copy) while the last chunk is written. nil, and the body
// goes through pkg/sftp's own 32 KiB reads, for a body smaller than a chunk or when the owner's
// share has no room.
func (s *Server) uploadChunks(ctx context.Context, size int64) ([][]byte, func()) {
	n := int64(s.cfg.DownloadBufferBytes)
	k := int64(files.StripeChunksPerChannel)
	if size >= 0 && size < n {
		return nil, func() {}
	}
	lease, err := s.downloads.TryAcquire(shareOwner(ctx), k*n)
	if err != nil {
		return nil, func() {}
	}
	bufs := make([][]byte, k)
	for i := range bufs {
		bufs[i] = chunkBuffer(n)
	}
	return bufs, func() {
		putChunkBuffers(bufs)
		lease.Release()
	}
}

// shareOwner is whose share of the server's budgets a request uses: the signed-in caller, or,
// for a link, the link's owner.
func shareOwner(ctx context.Context) string {
	if d, ok := ctx.Value(linkDecisionKey{}).(*access.Decision); ok {
		return d.Owner
	}
	p, _ := auth.FromContext(ctx)
	return p.User
}

// bulkResponse is the response writer http.ServeContent sends a file through: its ReadFrom
// (which ServeContent's io.CopyN calls) hands a files.StripedReader's chunks to the connection
// whole, one Write per chunk, instead of copying them out 32 KiB at a time.
type bulkResponse struct{ deadlineResponse }

// chunkWriter is a reader that writes its next n bytes to w itself (files.StripedReader).
type chunkWriter interface {
	WriteNTo(w io.Writer, n int64) (int64, error)
}

// ReadFrom implements io.ReaderFrom.
func (b bulkResponse) ReadFrom(src io.Reader) (int64, error) {
	if lr, ok := src.(*io.LimitedReader); ok {
		if cw, ok := lr.R.(chunkWriter); ok {
			n, err := cw.WriteNTo(b.deadlineResponse, lr.N)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(b.deadlineResponse, src)
}

// channelWindow is the SSH channel window of OpenSSH and x/crypto/ssh: one channel moves at most
// this much per round trip.
const channelWindow = 2 << 20

// chunkPool holds striped transfers' chunk buffers (*[]byte of DownloadBufferBytes).
var chunkPool sync.Pool

// stripeSet is what a striped download or upload holds: its chunk buffers and the further SFTP
// channels, delivered on chans as they open; release gives all of it back, freeBufs only the
// buffers (and their budget), for a caller done with them before it gives the channels back.
// Each may be called more than once.
type stripeSet struct {
	chans    <-chan *sftp.Client
	bufs     [][]byte
	freeBufs func()
	release  func()
}

// stripeChannels is the channel count that fills the bandwidth-delay product of the assumed
// link rate at round-trip time rtt, between 1 and StripeMaxChannels; 1 below StripeMinRTT (on a
// short path one window is plenty, and more channels only add processes competing for CPU).
func (s *Server) stripeChannels(rtt time.Duration) int {
	if rtt < s.cfg.StripeMinRTT {
		return 1
	}
	n := int(math.Ceil(s.cfg.StripeLinkRate * rtt.Seconds() / channelWindow))
	return max(1, min(n, s.cfg.StripeMaxChannels))
}

// spanChannels is how many channels a transfer of span bytes can keep busy, each moving
// files.StripeChunksPerChannel chunks at once (span < 0: unknown, as many as wanted). A channel
// beyond that would only be opened and closed again.
func (s *Server) spanChannels(span int64) int {
	if span < 0 {
		return math.MaxInt
	}
	per := int64(files.StripeChunksPerChannel) * int64(max(s.cfg.DownloadBufferBytes, 1))
	return int(min((span+per-1)/per, math.MaxInt32))
}

// measureRTT returns the fastest of three SFTP round trips on c, sent at once (a busy server or
// client only ever makes a round trip slower).
func measureRTT(c *sftp.Client) (time.Duration, error) {
	var (
		mu   sync.Mutex
		best = time.Duration(math.MaxInt64)
		errs []error
		wg   sync.WaitGroup
	)
	for range 3 {
		wg.Go(func() {
			t0 := time.Now()
			_, err := c.RealPath(".")
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			best = min(best, d)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return 0, fmt.Errorf("measure rtt: %w", errs[0])
	}
	return best, nil
}

// stripes decides whether a transfer of size bytes over c (a dedicated channel to t) is worth
// striping and, if so, takes the chunk buffers (files.StripeChunksPerChannel per channel, from
// the download budget without waiting) and starts opening the further channels, spread over the pool's connections
// (sshpool.StripeSFTP). The transfer starts on c at once; each further channel joins as it
// opens. It returns nil, and the caller goes on with the single channel, when the file is small,
// the path is short, or no buffers are free.
func (s *Server) stripes(ctx context.Context, t sshpool.Target, c *sftp.Client, size int64) *stripeSet {
	return s.stripesWith(ctx, t, c, size, size, nil)
}

// stripesWith is stripes whose channels on connections of their own come first from early (nil:
// none), the stripe connections asked for before c, and whose channel count is at most what
// span bytes can keep busy (spanChannels; span < 0: unknown, no limit). A resumable upload
// decides on what the upload has left (size) but moves only its request's part (span).
func (s *Server) stripesWith(ctx context.Context, t sshpool.Target, c *sftp.Client, size, span int64, early *earlyStripes) *stripeSet {
	if size < s.cfg.StripeMinBytes || s.cfg.StripeMaxChannels < 2 {
		return nil
	}
	rtt, err := measureRTT(c)
	if err != nil {
		return nil
	}
	n := min(s.stripeChannels(rtt), s.spanChannels(span))
	if n < 2 {
		return nil
	}
	chunk := int64(s.cfg.DownloadBufferBytes)
	per := files.StripeChunksPerChannel
	k := per * n
	owner := shareOwner(ctx)
	var lease *slot.Lease
	for ; k >= per; k -= per {
		if lease, err = s.downloads.TryAcquire(owner, int64(k)*chunk); err == nil {
			break
		}
	}
	if k < 2*per {
		lease.Release()
		return nil
	}
	n = k / per
	// One more chunk, where the budget has it, for the spare a striped read keeps to read a
	// stalled chunk again on another channel (files.StripedReader); without it the spare is
	// one of the k.
	spareLease, err := s.downloads.TryAcquire(owner, chunk)
	spare := err == nil
	if spare {
		k++
	}
	bufs := make([][]byte, k)
	for i := range bufs {
		bufs[i] = chunkBuffer(chunk)
	}
	chans, closeLeases := s.leaseExtra(ctx, t, n-1, early)
	s.log.Debug("striping a file transfer", "rtt", rtt, "channels", n, "chunks", k, "spare", spare)
	freeBufs := sync.OnceFunc(func() {
		putChunkBuffers(bufs)
		lease.Release()
		spareLease.Release()
	})
	return &stripeSet{chans: chans, bufs: bufs, freeBufs: freeBufs, release: sync.OnceFunc(func() {
		closeLeases()
		freeBufs()
	})}
}

// leaseExtra starts opening n dedicated SFTP channels to t at once and delivers each on the
// returned channel as it opens (within the pool's acquire timeout, and only while ctx lasts).
// stop cancels the opens still pending and closes every channel opened.
//
// Half of them (rounded up) go on the connection already carrying the transfer, or the
// busiest other one with room (sshpool.DedicatedSFTP): they are ready after one channel open,
// a few round trips, so the transfer runs over several channels almost from its first byte.
// The rest go each on a connection of its own (sshpool.StripeSFTP: one TCP connection and one
// sshd process per channel, for long paths where one connection's socket buffers or one sshd's
// CPU are the limit), which may have to be dialed first: those join later. Both kinds count
// against the pool's per-key, per-host and per-owner bounds as any channel does.
//
// Each kind is taken from early (nil: none) first, while it has any.
func (s *Server) leaseExtra(ctx context.Context, t sshpool.Target, n int, early *earlyStripes) (<-chan *sftp.Client, func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan *sftp.Client, n) // never blocks a sender
	var (
		mu   sync.Mutex
		held []*sshpool.SFTPLease
		wg   sync.WaitGroup
	)
	near := (n + 1) / 2
	var taken sync.WaitGroup
	for i := range n {
		taken.Add(1)
		wg.Go(func() {
			lease := s.deps.Pool.StripeSFTP
			if i < near {
				lease = s.deps.Pool.DedicatedSFTP
			}
			if l, ok := early.take(ctx, i < near); ok {
				lease = func(context.Context, sshpool.Target) (*sshpool.SFTPLease, error) { return l, nil }
			}
			taken.Done()
			l, err := lease(ctx, t)
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, l)
			mu.Unlock()
			out <- l.Client
		})
	}
	if early != nil {
		// The early channels this transfer does not want go back as soon as that is known.
		wg.Go(func() {
			taken.Wait()
			early.stop()
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out, func() {
		cancel()
		wg.Wait()
		for _, l := range held {
			_ = l.Close()
		}
	}
}

// serveStriped serves the regular file p (entry e) through c and the stripe's channels, each
// joining as it opens, with Range and conditional requests as http.ServeContent does them.
func (s *Server) serveStriped(w http.ResponseWriter, r *http.Request, fsys *files.FS, p string, st *stripeSet) error {
	f, e, err := fsys.OpenRead(r.Context(), p)
	if err != nil {
		return err
	}
	defer f.Close()
	sr := files.NewStripedReader([]io.ReaderAt{f}, e.Size, st.bufs, files.StripeChunksPerChannel)
	stop := files.JoinOn(st.chans, e.Path, os.O_RDONLY, func(h *sftp.File) bool { return sr.Join(h) })
	defer func() {
		_ = sr.Close()
		for _, h := range stop() {
			_ = h.Close()
		}
	}()
	return s.serveFile(w, r, e, sr)
}

// wantedBytes is how much of a size-byte file a GET asks for: all of it, or the sum of the
// ranges of its Range header (as far as they parse; http.ServeContent judges the header). A
// HEAD wants nothing. A striped read-ahead pays off only for a large answer.
func wantedBytes(r *http.Request, size int64) int64 {
	if r.Method == http.MethodHead {
		return 0
	}
	spec, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	if !ok || r.Header.Get("Range") == "" {
		return size
	}
	var total int64
	for part := range strings.SplitSeq(spec, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(part), "-")
		if !ok {
			return size
		}
		a, aerr := strconv.ParseInt(from, 10, 64)
		b, berr := strconv.ParseInt(to, 10, 64)
		switch {
		case from == "" && berr == nil: // the last b bytes
			total += min(b, size)
		case aerr == nil && to == "": // from a to the end
			total += max(size-a, 0)
		case aerr == nil && berr == nil && b >= a:
			total += min(b, size-1) - a + 1
		default:
			return size
		}
	}
	return total
}

// earlyStripeDials is how many stripe connections an upload to a system the pool has no
// connection to asks for beside its first channel's dial (earlyStripes): one, because the pool
// lets an owner dial a host twice at once by default (pool.max_dials_per_owner_host), so it
// never delays the first channel's dial.
const earlyStripeDials = 1

// earlyStripes are stripe channels a large upload asks for before its round-trip probe decides:
// near ones on the pooled connections (sshpool.DedicatedSFTP) and far ones on connections of
// their own (sshpool.StripeSFTP). A cold pool dials earlyStripeDials far ones beside the first
// channel's dial; a warm one asks for as many of each kind as the round trip the pool measured
// calls for as soon as the first channel is held (never ahead of it: they could take the slots
// it waits for). Without them a cold pool dials the first connection (some nine round trips),
// then probes the RTT, and only then dials the stripes' connections, another nine round trips
// during which one channel's window carries the upload; a warm one opens the stripes' channels
// and dials their connections only once the temporary file exists and the probe is back. They count against the pool's bounds as any channel does; leaseExtra takes
// them first, and stop gives back those nobody took (at once when the upload does not stripe,
// else once leaseExtra has taken what it wants).
type earlyStripes struct {
	near, far chan *sshpool.SFTPLease
	cancel    context.CancelFunc
	// next, if not nil, are further early stripes asked for later (a cold pool's, once its
	// first channel is up and the round trip known): taken once these are spent, stopped
	// with them. Set before anyone takes.
	next *earlyStripes
	wg   sync.WaitGroup
	once sync.Once
}

// startEarlyStripes asks the pool for near channels on t's pooled connections and far ones on
// connections of their own, each delivered as it opens.
func (s *Server) startEarlyStripes(ctx context.Context, t sshpool.Target, near, far int) *earlyStripes {
	ctx, cancel := context.WithCancel(ctx)
	e := &earlyStripes{near: make(chan *sshpool.SFTPLease, near), far: make(chan *sshpool.SFTPLease, far), cancel: cancel}
	ask := func(n int, lease func(context.Context, sshpool.Target) (*sshpool.SFTPLease, error), out chan<- *sshpool.SFTPLease) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if l, err := lease(ctx, t); err == nil {
					out <- l // never blocks: n slots
				}
			})
		}
		e.wg.Go(func() { // owned by e: ends when the asks do, which stop cancels
			wg.Wait()
			close(out)
		})
	}
	ask(near, s.deps.Pool.DedicatedSFTP, e.near)
	ask(far, s.deps.Pool.StripeSFTP, e.far)
	return e
}

// take waits for the next early channel, near or far (from e, then from e.next); false once
// every such ask has ended without one left, or when ctx ends first (a channel that opens later is closed by stop). A nil
// e has none.
func (e *earlyStripes) take(ctx context.Context, near bool) (*sshpool.SFTPLease, bool) {
	for ; e != nil; e = e.next {
		ch := e.far
		if near {
			ch = e.near
		}
		select {
		case l, ok := <-ch:
			if ok {
				return l, true
			}
		case <-ctx.Done():
			return nil, false
		}
	}
	return nil, false
}

// stop cancels the asks still under way and closes the channels nobody took; it may be called
// more than once, and on a nil e.
func (e *earlyStripes) stop() {
	if e == nil {
		return
	}
	e.once.Do(func() {
		e.cancel()
		for l := range e.near {
			_ = l.Close()
		}
		for l := range e.far {
			_ = l.Close()
		}
		e.wg.Wait()
	})
	e.next.stop()
}

// timeline records when an upload's steps ended, in milliseconds since it started, for the
// debug record "upload timeline".
type timeline struct {
	start time.Time
	mu    sync.Mutex
	steps []string
}

func newTimeline() *timeline { return &timeline{start: time.Now()} }

// note records step now.
func (tl *timeline) note(step string) {
	ms := time.Since(tl.start).Milliseconds()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.steps = append(tl.steps, fmt.Sprintf("%s@%d", step, ms))
}

// String lists the steps in the order they ended.
func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.steps, " ")
}
