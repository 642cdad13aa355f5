package files

import (
	"context"
	"errors"
	"io"

	"github.com/pkg/sftp"
)

// MaxExcerpt caps what Head and Tail return; a request for more is cut to this size and the
// Excerpt says so.
const MaxExcerpt = 1 << 20

// DefaultLines is what Head and Tail return when neither bytes nor lines is given.
const DefaultLines = 10

// excerptChunk is the read size Head and Tail use when counting lines.
const excerptChunk = 64 << 10

// Excerpt is the start or end of a file as returned by Head and Tail.
type Excerpt struct {
	// Data is the excerpt.
	Data []byte
	// Truncated is true when MaxExcerpt cut the excerpt short of what was asked.
	Truncated bool
	// Size is the file's size when it was opened.
	Size int64
}

// OpenRead opens the regular file p for reading and describes it. The caller streams with
// WriteTo (pipelined) or serves ranges with ReadAt, and must Close the file.
func (f *FS) OpenRead(ctx context.Context, p string) (*sftp.File, *Entry, error) {
	const op = "open"
	abs, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return nil, nil, err
	}
	return f.openRegular(ctx, op, abs)
}

// openRegular opens a resolved path for reading after checking it is a regular file.
func (f *FS) openRegular(ctx context.Context, op, abs string) (*sftp.File, *Entry, error) {
	e, err := f.stat(ctx, op, abs, true)
	if err != nil {
		return nil, nil, err
	}
	if err := regularOnly(op, e); err != nil {
		return nil, nil, err
	}
	file, err := f.c.Open(abs)
	if err != nil {
		return nil, nil, wrap(op, abs, err)
	}
	return file, e, nil
}

// regularOnly refuses anything but a regular file. Opening a FIFO would block OpenSSH's
// single-threaded sftp-server, and with it every request sharing the pooled channel.
func regularOnly(op string, e *Entry) error {
	switch e.Type {
	case TypeFile:
		return nil
	case TypeDir:
		return newErr(op, e.Path, ErrIsDir, nil)
	}
	return newErr(op, e.Path, ErrInvalid, errors.New("not a regular file"))
}

// excerptArgs validates Head/Tail arguments and applies the default of DefaultLines lines.
func excerptArgs(op, p string, n, lines int) (int, int, error) {
	if n < 0 || lines < 0 {
		return 0, 0, newErr(op, p, ErrInvalid, errors.New("negative bytes or lines"))
	}
	if n > 0 && lines > 0 {
		return 0, 0, newErr(op, p, ErrInvalid, errors.New("give bytes or lines, not both"))
	}
	if n == 0 && lines == 0 {
		lines = DefaultLines
	}
	return n, lines, nil
}

// Head returns the first n bytes, or else the first lines lines, of file p over SFTP reads
// (DefaultLines lines when both are 0), at most MaxExcerpt bytes.
func (f *FS) Head(ctx context.Context, p string, n, lines int) (*Excerpt, error) {
	const op = "head"
	n, lines, err := excerptArgs(op, p, n, lines)
	if err != nil {
		return nil, err
	}
	abs, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return nil, err
	}
	file, e, err := f.openRegular(ctx, op, abs)
	if err != nil {
		return nil, err
	}
	defer file.Close()

	x := &Excerpt{Size: e.Size}
	if n > 0 {
		want := min(n, MaxExcerpt)
		x.Data, err = readAt(file, 0, want)
		x.Truncated = n > MaxExcerpt && len(x.Data) == MaxExcerpt
		return x, wrap(op, abs, err)
	}
	var buf []byte
	var off int64
	for {
		if err := checkCtx(ctx, op, abs); err != nil {
			return nil, err
		}
		chunk, err := readAt(file, off, excerptChunk)
		if err != nil {
			return nil, wrap(op, abs, err)
		}
		for i, c := range chunk {
			if c != '\n' {
				continue
			}
			if lines--; lines == 0 {
				chunk = chunk[:i+1]
				break
			}
		}
		buf = append(buf, chunk...)
		if len(buf) > MaxExcerpt || (len(buf) == MaxExcerpt && lines > 0) {
			x.Data, x.Truncated = buf[:MaxExcerpt], true
			return x, nil
		}
		if lines == 0 || len(chunk) < excerptChunk {
			x.Data = buf
			return x, nil
		}
		off += int64(len(chunk))
	}
}

// Tail returns the last n bytes, or else the last lines lines, of file p (DefaultLines lines
// when both are 0), at most MaxExcerpt bytes. Lines are found by reading backwards in chunks.
func (f *FS) Tail(ctx context.Context, p string, n, lines int) (*Excerpt, error) {
	const op = "tail"
	n, lines, err := excerptArgs(op, p, n, lines)
	if err != nil {
		return nil, err
	}
	abs, err := f.resolve(ctx, op, p, true)
	if err != nil {
		return nil, err
	}
	file, e, err := f.openRegular(ctx, op, abs)
	if err != nil {
		return nil, err
	}
	defer file.Close()

	size := e.Size
	x := &Excerpt{Size: size}
	if n > 0 {
		want := min(int64(n), MaxExcerpt, size)
		x.Data, err = readAt(file, size-want, int(want))
		x.Truncated = n > MaxExcerpt && size > MaxExcerpt
		return x, wrap(op, abs, err)
	}
	// Scan backwards for the lines-th newline before the end, not counting a final newline.
	var buf []byte // the tail read so far: file[size-len(buf):size]
	skipLast := true
	for hi := size; hi > 0; {
		if err := checkCtx(ctx, op, abs); err != nil {
			return nil, err
		}
		lo := max(hi-excerptChunk, 0)
		chunk, err := readAt(file, lo, int(hi-lo))
		if err != nil {
			return nil, wrap(op, abs, err)
		}
		if int64(len(chunk)) < hi-lo { // the file shrank: give what is there
			x.Data = append(chunk, buf...)
			return x, nil
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				skipLast = false
				continue
			}
			if skipLast {
				skipLast = false
				continue
			}
			if lines--; lines == 0 {
				x.Data = append(chunk[i+1:], buf...)
				return capTail(x), nil
			}
		}
		buf = append(chunk, buf...)
		if len(buf) > MaxExcerpt {
			x.Data, x.Truncated = buf[len(buf)-MaxExcerpt:], true
			return x, nil
		}
		hi = lo
	}
	x.Data = buf
	return capTail(x), nil
}

// capTail keeps the last MaxExcerpt bytes of x.Data.
func capTail(x *Excerpt) *Excerpt {
	if len(x.Data) > MaxExcerpt {
		x.Data, x.Truncated = x.Data[len(x.Data)-MaxExcerpt:], true
	}
	return x
}

// readAt reads up to n bytes at off; a short read at the end of the file is not an error.
func readAt(r io.ReaderAt, off int64, n int) ([]byte, error) {
	buf := make([]byte, n)
	got, err := r.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:got:got], nil
}
