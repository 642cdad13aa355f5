package api

import (
	"bufio"
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

	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// downloadBuffer takes one read-ahead buffer from the download budget, waiting at most
// BudgetWait, and returns it with the function that gives it back.
func (s *Server) downloadBuffer(ctx context.Context) (*bufio.Reader, func(), error) {
	n := int64(s.cfg.DownloadBufferBytes)
	wctx, cancel := s.budgetCtx(ctx)
	err := s.downloads.Acquire(wctx, n)
	cancel()
	if err != nil {
		return nil, nil, errBusy("download buffers", err)
	}
	br, _ := s.dlBufs.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(nil, s.cfg.DownloadBufferBytes)
	}
	return br, func() {
		br.Reset(nil)
		s.dlBufs.Put(br)
		s.downloads.Release(n)
	}, nil
}

// pipelinedReader gives http.ServeContent an io.ReadSeeker whose reads are large (the size of
// the download buffer), so pkg/sftp keeps many read requests in flight instead of one 32 KiB
// round trip at a time.
type pipelinedReader struct {
	f    *sftp.File
	br   *bufio.Reader
	size int64
	pos  int64
}

func newPipelinedReader(f *sftp.File, br *bufio.Reader, size int64) *pipelinedReader {
	br.Reset(f)
	return &pipelinedReader{f: f, br: br, size: size}
}

func (p *pipelinedReader) Read(b []byte) (int, error) {
	n, err := p.br.Read(b)
	p.pos += int64(n)
	return n, err
}

// Seek moves the read position. The size is known from the stat, so seeking to the end does
// not ask the server.
func (p *pipelinedReader) Seek(offset int64, whence int) (int64, error) {
	abs, err := files.SeekPosition(p.pos, p.size, offset, whence)
	if err != nil {
		return 0, err
	}
	if abs == p.pos {
		return abs, nil
	}
	if _, err := p.f.Seek(abs, io.SeekStart); err != nil {
		return 0, fmt.Errorf("seek: %w", err)
	}
	p.br.Reset(p.f)
	p.pos = abs
	return abs, nil
}

// channelWindow is the SSH channel window of OpenSSH and x/crypto/ssh: one channel moves at most
// this much per round trip.
const channelWindow = 2 << 20

// chunkPool holds striped transfers' chunk buffers (*[]byte of DownloadBufferBytes).
var chunkPool sync.Pool

// stripeSet is what a striped download or upload holds: extra SFTP channels and chunk buffers,
// both given back by release.
type stripeSet struct {
	clients []*sftp.Client
	bufs    [][]byte
	release func()
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

// measureRTT returns the fastest of three SFTP round trips on c (a busy server or client only
// ever makes a round trip slower).
func measureRTT(c *sftp.Client) (time.Duration, error) {
	best := time.Duration(math.MaxInt64)
	for range 3 {
		t0 := time.Now()
		if _, err := c.RealPath("."); err != nil {
			return 0, fmt.Errorf("measure rtt: %w", err)
		}
		best = min(best, time.Since(t0))
	}
	return best, nil
}

// stripes decides whether a transfer of size bytes over c (a dedicated channel to t) is worth
// striping and, if so, leases the extra channels and chunk buffers: as many channels as the
// measured RTT calls for, two chunk buffers per channel. It takes only what is free within a
// short wait (the download budget's bytes, the pool's channels); it returns nil, and the caller
// goes on with the single channel, when the file is small, the path is short, or nothing extra
// could be had.
func (s *Server) stripes(ctx context.Context, t sshpool.Target, c *sftp.Client, size int64) *stripeSet {
	if size < s.cfg.StripeMinBytes || s.cfg.StripeMaxChannels < 2 {
		return nil
	}
	rtt, err := measureRTT(c)
	if err != nil {
		return nil
	}
	n := s.stripeChannels(rtt)
	if n < 2 {
		return nil
	}
	chunk := int64(s.cfg.DownloadBufferBytes)
	k := 2 * n
	for k >= 2 && !s.downloads.TryAcquire(int64(k)*chunk) {
		k /= 2
	}
	if k < 2 {
		return nil
	}
	n = max(2, min(n, k/2))
	clients, closeLeases := s.leaseExtra(ctx, t, n-1, 2*rtt+time.Second)
	if len(clients) == 0 {
		s.downloads.Release(int64(k) * chunk)
		return nil
	}
	bufs := make([][]byte, k)
	for i := range bufs {
		if b, _ := chunkPool.Get().(*[]byte); b != nil && int64(len(*b)) == chunk {
			bufs[i] = *b
		} else {
			bufs[i] = make([]byte, chunk)
		}
	}
	s.log.Debug("striping a file transfer", "rtt", rtt, "channels", len(clients)+1, "chunks", k)
	return &stripeSet{clients: clients, bufs: bufs, release: func() {
		closeLeases()
		for _, b := range bufs {
			chunkPool.Put(&b)
		}
		s.downloads.Release(int64(k) * chunk)
	}}
}

// leaseExtra opens up to n dedicated SFTP channels to t at once, waiting at most wait, and keeps
// those that opened.
func (s *Server) leaseExtra(ctx context.Context, t sshpool.Target, n int, wait time.Duration) ([]*sftp.Client, func()) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	leases := make([]*sshpool.SFTPLease, n)
	var wg sync.WaitGroup
	for i := range leases {
		wg.Go(func() {
			if l, err := s.deps.Pool.DedicatedSFTP(ctx, t); err == nil {
				leases[i] = l
			}
		})
	}
	wg.Wait()
	var clients []*sftp.Client
	var held []*sshpool.SFTPLease
	for _, l := range leases {
		if l != nil {
			clients = append(clients, l.Client)
			held = append(held, l)
		}
	}
	return clients, func() {
		for _, l := range held {
			_ = l.Close()
		}
	}
}

// serveStriped serves the regular file p (entry e) through c and the stripe's channels at once,
// with Range and conditional requests as http.ServeContent does them.
func (s *Server) serveStriped(w http.ResponseWriter, r *http.Request, fsys *files.FS, p string, st *stripeSet) error {
	f, e, err := fsys.OpenRead(r.Context(), p)
	if err != nil {
		return err
	}
	defer f.Close()
	extra, err := files.OpenOn(st.clients, e.Path, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer func() {
		for _, x := range extra {
			_ = x.Close()
		}
	}()
	handles := []io.ReaderAt{f}
	for _, x := range extra {
		handles = append(handles, x)
	}
	sr := files.NewStripedReader(handles, e.Size, st.bufs)
	defer sr.Close()
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
