package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/pkg/sftp"

	"github.com/sshapi/sshapi/internal/sshpool"
)

// stream is a pair of dedicated SFTP channels, one on each system, that a run moves data over.
// Leases are opened on first use and dropped after a connection error; a stream that cannot
// reopen stays dead until the next round.
type stream struct {
	r *run

	mu       sync.Mutex
	src, dst *sshpool.SFTPLease
	openErr  error // set when reopening failed in this round

	// Open handles on the multi-range file this stream is working on.
	seq    int64
	sf, df *sftp.File
}

// clients returns the stream's SFTP clients, opening leases as needed.
func (s *stream) clients(ctx context.Context) (*sftp.Client, *sftp.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.openErr != nil {
		return nil, nil, s.openErr
	}
	open := func(t sshpool.Target) (*sshpool.SFTPLease, error) {
		octx, cancel := context.WithTimeout(ctx, s.r.e.cfg.OpenTimeout)
		defer cancel()
		l, err := s.r.e.pool.DedicatedSFTP(octx, t)
		s.r.trackLease(l, true)
		return l, err
	}
	// Both channels open at once: on a long path each costs round trips, and a new connection
	// (dial, key exchange, authentication) several.
	var serr, derr error
	var wg sync.WaitGroup
	if s.src == nil {
		wg.Go(func() { s.src, serr = open(s.r.src.Target) })
	}
	if s.dst == nil {
		wg.Go(func() { s.dst, derr = open(s.r.dst.Target) })
	}
	wg.Wait()
	switch {
	case serr != nil:
		s.openErr = fmt.Errorf("open SFTP channel to the source system: %w", serr)
	case derr != nil:
		s.openErr = fmt.Errorf("open SFTP channel to the destination system: %w", derr)
	default:
		return s.src.Client, s.dst.Client, nil
	}
	return nil, nil, s.openErr
}

// fail drops the stream's channels if err shows that a connection broke.
func (s *stream) fail(err error) {
	if !isConnErr(err) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
}

func (s *stream) dropLocked() {
	s.closeFilesLocked()
	// Closing a channel waits for the peer's close, a round trip: both at once.
	var wg sync.WaitGroup
	for _, l := range []*sshpool.SFTPLease{s.src, s.dst} {
		if l != nil {
			s.r.trackLease(l, false)
			wg.Go(func() { _ = l.Close() })
		}
	}
	wg.Wait()
	s.src, s.dst = nil, nil
}

// dead reports whether the stream could not reopen in this round.
func (s *stream) dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.openErr != nil
}

// revive lets a dead stream try to reopen (at the start of a round).
func (s *stream) revive() {
	s.mu.Lock()
	s.openErr = nil
	s.mu.Unlock()
}

// close releases the stream's channels.
func (s *stream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked()
}

// files returns open handles on it's source and its temporary file, reusing those of the
// previous range of the same file.
func (s *stream) files(ctx context.Context, it *Item, tmp string) (*sftp.File, *sftp.File, error) {
	sc, dc, err := s.clients(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sf != nil && s.seq == it.Seq {
		return s.sf, s.df, nil
	}
	s.closeFilesLocked()
	// Both files open at once (one round trip instead of two).
	var sf, df *sftp.File
	var serr error
	var wg sync.WaitGroup
	wg.Go(func() { sf, serr = sc.Open(it.Source) })
	df, err = openTemp(dc, tmp)
	wg.Wait()
	if serr != nil {
		if df != nil {
			_ = df.Close()
		}
		return nil, nil, fmt.Errorf("open source %s: %w", it.Source, serr)
	}
	if err != nil {
		_ = sf.Close()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("temporary file %s vanished", tmp)
		}
		return nil, nil, fmt.Errorf("open %s: %w", tmp, err)
	}
	s.seq, s.sf, s.df = it.Seq, sf, df
	return sf, df, nil
}

// closeFiles closes the cached handles.
func (s *stream) closeFiles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeFilesLocked()
}

func (s *stream) closeFilesLocked() {
	var wg sync.WaitGroup
	for _, f := range []*sftp.File{s.sf, s.df} {
		if f != nil {
			wg.Go(func() { _ = f.Close() })
		}
	}
	wg.Wait()
	s.sf, s.df = nil, nil
}

// warmStreams opens the channels of streams 1..n-1 in the background, so that they are ready
// (connections dialed) when the first ranges start instead of each costing its own dial then.
// closeStreams waits for them.
func (r *run) warmStreams(ctx context.Context, n int) {
	for _, s := range r.streams[1:min(n+1, len(r.streams))] {
		r.warming.Go(func() { _, _, _ = s.clients(ctx) })
	}
}

// closeStreams releases every stream's channels, all at once: on a long path each close
// waits a round trip for the peer's.
func (r *run) closeStreams() {
	r.warming.Wait()
	var wg sync.WaitGroup
	for _, s := range r.streams {
		wg.Go(s.close)
	}
	wg.Wait()
}

// removeTemps deletes the temporary files of items on the destination t.
func removeTemps(ctx context.Context, pool Pool, t sshpool.Target, id string, items []*Item, timeout time.Duration) error {
	octx, cancel := context.WithTimeout(ctx, timeout)
	lease, err := pool.DedicatedSFTP(octx, t)
	cancel()
	if err != nil {
		return fmt.Errorf("remove temporary files: %w", err)
	}
	defer lease.Close()
	var mu sync.Mutex
	var errs []error
	forEach(items, 16, func(_ int, it *Item) {
		if err := lease.Remove(tempName(it.Destination, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("remove %d temporary files: %w", len(errs), errors.Join(errs[:min(len(errs), 3)]...))
	}
	return nil
}
