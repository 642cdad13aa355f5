package sftp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"sync"

	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/storage"
)

// Striped uploads.
//
// An upload is one temporary file (files.PartUpload, created, committed and aborted over the
// backend's first channel). A backend made by NewStriped also writes the parts over other
// channels: part n goes over channel (n-1) mod k, each of those channels opening the same
// temporary file for writing once, the first time a part comes its way (files.OpenResumable:
// the destination is resolved and confined again on that channel, and the temporary file must
// still be a regular file). A part written over another channel is declared to the upload
// (PartUpload.Adopt) only once its writes were all acknowledged, so Commit sees exactly the
// parts that are on the server, whichever channel carried them; Commit and Abort close the
// other channels' handles first. A file of one part never opens another handle.

// NewStriped returns the backend for fss[0] whose "/" is the remote directory root, writing the
// parts of its uploads over the channels of all of fss (the same system and user, one
// files.FS per SFTP channel). Everything but part writes goes over fss[0].
func NewStriped(root string, fss ...*files.FS) *Backend {
	b := New(fss[0], root)
	b.stripe = slices.Clone(fss)
	return b
}

// upload adapts a files.PartUpload, remembering the parts written and the channels that
// carried them.
type upload struct {
	*files.PartUpload
	b      *Backend
	remote string // the destination's remote path, as the channels resolve it

	mu    sync.Mutex
	parts map[int]storage.Part
	lanes []*lane      // per channel of b.stripe; lanes[0] unused (the PartUpload's own handle)
	used  map[int]bool // the channels that carried a part
}

// lane is the temporary file opened over one more channel.
type lane struct {
	mu sync.Mutex
	f  *files.ResumableFile
}

// newUpload wraps u, an upload to remote path remote.
func (b *Backend) newUpload(u *files.PartUpload, remote string) *upload {
	return &upload{PartUpload: u, b: b, remote: remote, parts: map[int]storage.Part{},
		lanes: make([]*lane, len(b.stripe)), used: map[int]bool{}}
}

// WritePart implements storage.Upload over channel (n-1) mod k.
func (u *upload) WritePart(ctx context.Context, n int, off int64, r io.Reader, size int64, sum []byte) error {
	ch := 0
	if n >= 1 {
		ch = (n - 1) % len(u.b.stripe)
	}
	if ch == 0 {
		if err := u.PartUpload.WritePart(ctx, n, off, r, size, sum); err != nil {
			return err
		}
	} else if err := u.writeLane(ctx, ch, n, off, r, size, sum); err != nil {
		return err
	}
	u.mu.Lock()
	u.parts[n] = storage.Part{Number: n, Offset: off, Size: size, SHA256: slices.Clone(sum)}
	u.used[ch] = true
	u.mu.Unlock()
	return nil
}

// writeLane writes part n over channel ch, opening the temporary file there on first use, and
// declares it to the upload. A failed write closes that handle: the next part over the channel
// opens it again (a broken channel fails there).
func (u *upload) writeLane(ctx context.Context, ch, n int, off int64, r io.Reader, size int64, sum []byte) error {
	if off < 0 || size < 0 {
		return fmt.Errorf("upload %s: part %d at %d of %d bytes: %w", u.remote, n, off, size, files.ErrInvalid)
	}
	u.mu.Lock()
	l := u.lanes[ch]
	if l == nil {
		l = &lane{}
		u.lanes[ch] = l
	}
	u.mu.Unlock()
	l.mu.Lock()
	f := l.f
	if f == nil {
		var err error
		if f, err = u.b.stripe[ch].OpenResumable(ctx, u.remote, u.TempName()); err != nil {
			l.mu.Unlock()
			return fmt.Errorf("part %d over channel %d: %w", n, ch, err)
		}
		l.f = f
	}
	l.mu.Unlock()
	err := sendPart(ctx, r, size, sum, func(b []byte) error {
		if len(b) == 0 {
			return nil
		}
		return f.WriteAt(b, off)
	})
	if err != nil {
		if !errors.Is(err, files.ErrPartDigest) {
			l.mu.Lock()
			if l.f == f {
				_ = f.Close()
				l.f = nil
			}
			l.mu.Unlock()
		}
		return fmt.Errorf("upload %s: part %d: %w", u.remote, n, err)
	}
	u.Adopt(n, off, size)
	return nil
}

// sendPart hands the size bytes of r, checked against sum when it is not nil, to write in one
// call. A *bytes.Reader (any io.WriterTo that writes in one call) hands over its own bytes,
// which are checked and written without a copy; other readers are gathered first.
func sendPart(ctx context.Context, r io.Reader, size int64, sum []byte, write func([]byte) error) error {
	s := &partSink{size: size, sum: sum, write: write}
	var err error
	if wt, ok := r.(io.WriterTo); ok {
		_, err = wt.WriteTo(s)
	} else {
		_, err = io.Copy(s, ctxReader{ctx, r})
	}
	if s.err != nil {
		return s.err
	}
	if err != nil {
		return err
	}
	return s.finish()
}

// partSink receives a part's bytes: a single Write of the whole part is checked and written at
// once; smaller writes are gathered for finish.
type partSink struct {
	size  int64
	sum   []byte
	write func([]byte) error
	buf   []byte
	sent  bool
	err   error // the check's or the write's error (returned to the caller, not the copier)
}

// errPartTooLong ends a copy that brings more bytes than the part's size.
var errPartTooLong = errors.New("more bytes than the part's size")

func (s *partSink) Write(p []byte) (int, error) {
	switch {
	case s.sent || int64(len(s.buf)+len(p)) > s.size:
		s.err = errPartTooLong
		return 0, s.err
	case s.buf == nil && int64(len(p)) == s.size:
		s.sent = true
		if s.err = s.check(p); s.err == nil {
			s.err = s.write(p)
		}
		if s.err != nil {
			return 0, s.err
		}
		return len(p), nil
	}
	if s.buf == nil {
		s.buf = make([]byte, 0, s.size)
	}
	s.buf = append(s.buf, p...)
	return len(p), nil
}

// finish checks and writes the gathered bytes, unless the part was written whole already.
func (s *partSink) finish() error {
	if s.sent {
		return nil
	}
	if int64(len(s.buf)) != s.size {
		return fmt.Errorf("%d bytes for a part of %d: %w", len(s.buf), s.size, io.ErrUnexpectedEOF)
	}
	if err := s.check(s.buf); err != nil {
		return err
	}
	return s.write(s.buf)
}

// check compares b's SHA-256 with the part's.
func (s *partSink) check(b []byte) error {
	if s.sum == nil {
		return nil
	}
	if got := sha256.Sum256(b); !bytes.Equal(got[:], s.sum) {
		return files.ErrPartDigest
	}
	return nil
}

// ctxReader ends a read when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// closeLanes closes the other channels' handles of the temporary file.
func (u *upload) closeLanes() error {
	u.mu.Lock()
	lanes := slices.Clone(u.lanes)
	u.mu.Unlock()
	var first error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, l := range lanes {
		if l == nil {
			continue
		}
		wg.Go(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.f == nil {
				return
			}
			err := l.f.Close()
			l.f = nil
			if err != nil {
				emu.Lock()
				first = cmpErr(first, err)
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// cmpErr is a when it is set, else b.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ID implements storage.Upload: the temporary file's name.
func (u *upload) ID(context.Context) (string, error) { return u.TempName(), nil }

// Parts implements storage.Upload.
func (u *upload) Parts() []storage.Part {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]storage.Part, 0, len(u.parts))
	for _, p := range u.parts {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// Channels is how many SFTP channels carried the parts written through this Upload.
func (u *upload) Channels() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.used)
}

// RemoteTempFile is the remote path of the temporary file the parts are written to, for a
// command on the same system that reads them back (a streamed checksum).
func (u *upload) RemoteTempFile() string { return path.Join(path.Dir(u.Path()), u.TempName()) }

// Commit implements storage.Upload: the other channels' handles are closed (their writes were
// all acknowledged), then the temporary file is cut, given its mode and renamed into place.
func (u *upload) Commit(ctx context.Context) (*storage.Entry, error) {
	if err := u.closeLanes(); err != nil {
		_ = u.PartUpload.Abort(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("upload %s: close the temporary file: %w", u.remote, err)
	}
	e, err := u.PartUpload.Commit(ctx)
	if err != nil {
		return nil, err
	}
	return u.b.entry(e), nil
}

// Abort implements storage.Upload.
func (u *upload) Abort(ctx context.Context) error {
	_ = u.closeLanes()
	return u.PartUpload.Abort(ctx)
}

// Release closes the other channels' handles of the temporary file and leaves the file, for an
// upload that is given up for now and resumed later (Backend.Resume).
func (u *upload) Release() { _ = u.closeLanes() }
