package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/pkg/sftp"
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
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = p.pos + offset
	case io.SeekEnd:
		abs = p.size + offset
	default:
		return 0, fmt.Errorf("seek: bad whence %d", whence)
	}
	if abs < 0 {
		return 0, errors.New("seek: negative position")
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
