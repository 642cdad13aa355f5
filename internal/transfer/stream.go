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
	var err error
	if s.src == nil {
		if s.src, err = open(s.r.src.Target); err != nil {
			s.openErr = fmt.Errorf("open SFTP channel to the source system: %w", err)
			return nil, nil, s.openErr
		}
	}
	if s.dst == nil {
		if s.dst, err = open(s.r.dst.Target); err != nil {
			s.openErr = fmt.Errorf("open SFTP channel to the destination system: %w", err)
			return nil, nil, s.openErr
		}
	}
	return s.src.Client, s.dst.Client, nil
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
	for _, l := range []*sshpool.SFTPLease{s.src, s.dst} {
		if l != nil {
			s.r.trackLease(l, false)
			_ = l.Close()
		}
	}
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
	sf, err := sc.Open(it.Source)
	if err != nil {
		return nil, nil, fmt.Errorf("open source %s: %w", it.Source, err)
	}
	df, err := openTemp(dc, tmp)
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
	if s.sf != nil {
		_ = s.sf.Close()
	}
	if s.df != nil {
		_ = s.df.Close()
	}
	s.sf, s.df = nil, nil
}

// closeStreams releases every stream's channels.
func (r *run) closeStreams() {
	for _, s := range r.streams {
		s.close()
	}
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
