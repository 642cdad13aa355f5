package files

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/pkg/sftp"
)

// archiveSink receives the entries of a directory being archived.
type archiveSink interface {
	dir(name string, fi os.FileInfo) error
	link(name, target string, fi os.FileInfo) error
	// file returns the writer for a regular file's size bytes.
	file(name string, fi os.FileInfo) (io.Writer, error)
	close() error
}

// WriteArchive streams directory dir (or a single file) to w as an archive built in sshapi
// while walking over SFTP: no process runs on the server and memory stays bounded (at most
// archiveSortMax entries per directory level). format is "tar", "tar.gz" or "zip". Entries are
// named "<base of dir>/<relative path>", sorted within each directory (up to archiveSortMax
// entries, see archiveDir); symlinks are stored as links and devices, FIFOs and
// sockets are skipped. A file that changes size while it is read fails the archive.
func (f *FS) WriteArchive(ctx context.Context, dir, format string, w io.Writer) error {
	const op = "archive"
	abs, err := f.resolve(ctx, op, dir, true)
	if err != nil {
		return err
	}
	sink, err := newArchiveSink(format, w)
	if err != nil {
		return newErr(op, abs, ErrInvalid, err)
	}
	if err := checkCtx(ctx, op, abs); err != nil {
		return err
	}
	fi, err := f.c.Stat(abs)
	if err != nil {
		return wrap(op, abs, err)
	}
	name := path.Base(abs)
	if name == "/" {
		name = "root"
	}
	if err := f.archiveEntry(ctx, op, sink, abs, name, fi); err != nil {
		return err
	}
	if err := sink.close(); err != nil {
		return wrap(op, abs, err)
	}
	return nil
}

// archiveEntry adds one path (and, for a directory, everything below it) to sink.
func (f *FS) archiveEntry(ctx context.Context, op string, sink archiveSink, abs, name string, fi os.FileInfo) error {
	if err := checkCtx(ctx, op, abs); err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if err := sink.dir(name, fi); err != nil {
			return wrap(op, abs, err)
		}
		return f.archiveDir(ctx, op, sink, abs, name)
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := f.c.ReadLink(abs)
		if err != nil {
			return wrap(op, abs, err)
		}
		return wrap(op, abs, sink.link(name, target, fi))
	case fi.Mode().IsRegular():
		return f.archiveFile(ctx, op, sink, abs, name, fi)
	}
	return nil
}

// archiveSortMax is the number of entries of one directory an archive holds to sort them.
const archiveSortMax = 10_000

// archiveDir adds the entries of directory abs: in name order when there are at most
// archiveSortMax of them; in a larger directory the first archiveSortMax read are added in name
// order and the rest as the server lists them, so memory stays bounded whatever the directory's
// size (a large directory is read batch by batch, see FS.eachInfo).
func (f *FS) archiveDir(ctx context.Context, op string, sink archiveSink, abs, name string) error {
	var held []os.FileInfo
	add := func(child os.FileInfo) error {
		return f.archiveEntry(ctx, op, sink, path.Join(abs, child.Name()), name+"/"+child.Name(), child)
	}
	flush := func() error {
		slices.SortFunc(held, func(a, b os.FileInfo) int { return strings.Compare(a.Name(), b.Name()) })
		for _, child := range held {
			if err := add(child); err != nil {
				return err
			}
		}
		held = nil
		return nil
	}
	streaming := false
	err := f.eachInfo(ctx, op, abs, func(child os.FileInfo) error {
		if streaming {
			return add(child)
		}
		if held = append(held, child); len(held) >= archiveSortMax {
			streaming = true
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// archiveFile copies one regular file into sink with pipelined reads.
func (f *FS) archiveFile(ctx context.Context, op string, sink archiveSink, abs, name string, fi os.FileInfo) error {
	src, err := f.c.Open(abs)
	if err != nil {
		return wrap(op, abs, err)
	}
	defer src.Close()
	dst, err := sink.file(name, fi)
	if err != nil {
		return wrap(op, abs, err)
	}
	lw := &limitWriter{ctx: ctx, w: dst, n: fi.Size()}
	_, err = src.WriteTo(lw)
	if errors.Is(err, errLimit) {
		err = nil
	}
	if err != nil {
		return wrap(op, abs, err)
	}
	if lw.n != 0 || lw.over {
		return newErr(op, abs, nil, errors.New("file changed size while being archived"))
	}
	return nil
}

// errLimit stops a WriteTo once a file's announced size has been written.
var errLimit = errors.New("size limit reached")

// limitWriter passes on exactly n bytes, notes whether more came, and stops when ctx is done.
type limitWriter struct {
	ctx  context.Context
	w    io.Writer
	n    int64
	over bool
}

// Write implements io.Writer.
func (l *limitWriter) Write(p []byte) (int, error) {
	if err := l.ctx.Err(); err != nil {
		return 0, err
	}
	if int64(len(p)) > l.n {
		l.over = true
		n, err := l.w.Write(p[:l.n])
		l.n -= int64(n)
		if err != nil {
			return n, err
		}
		return n, errLimit
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	return n, err
}

// tarSink writes a tar stream, optionally gzip-compressed.
type tarSink struct {
	tw *tar.Writer
	gz *gzip.Writer
}

func (t *tarSink) header(name string, fi os.FileInfo) *tar.Header {
	h := &tar.Header{Name: name, Mode: int64(unixPerm(fi.Mode())), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if st, ok := fi.Sys().(*sftp.FileStat); ok {
		h.Uid, h.Gid = int(st.UID), int(st.GID)
	}
	return h
}

func (t *tarSink) dir(name string, fi os.FileInfo) error {
	h := t.header(name+"/", fi)
	h.Typeflag = tar.TypeDir
	return t.tw.WriteHeader(h)
}

func (t *tarSink) link(name, target string, fi os.FileInfo) error {
	h := t.header(name, fi)
	h.Typeflag, h.Linkname = tar.TypeSymlink, target
	return t.tw.WriteHeader(h)
}

func (t *tarSink) file(name string, fi os.FileInfo) (io.Writer, error) {
	h := t.header(name, fi)
	h.Typeflag, h.Size = tar.TypeReg, fi.Size()
	return t.tw, t.tw.WriteHeader(h)
}

func (t *tarSink) close() error {
	err := t.tw.Close()
	if t.gz != nil {
		err = errors.Join(err, t.gz.Close())
	}
	return err
}

// zipSink writes a zip stream.
type zipSink struct {
	zw *zip.Writer
}

func (z *zipSink) header(name string, fi os.FileInfo, method uint16) *zip.FileHeader {
	h := &zip.FileHeader{Name: name, Method: method, Modified: fi.ModTime()}
	h.SetMode(fi.Mode())
	return h
}

func (z *zipSink) dir(name string, fi os.FileInfo) error {
	_, err := z.zw.CreateHeader(z.header(name+"/", fi, zip.Store))
	return err
}

func (z *zipSink) link(name, target string, fi os.FileInfo) error {
	w, err := z.zw.CreateHeader(z.header(name, fi, zip.Store))
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, target)
	return err
}

func (z *zipSink) file(name string, fi os.FileInfo) (io.Writer, error) {
	return z.zw.CreateHeader(z.header(name, fi, zip.Deflate))
}

func (z *zipSink) close() error { return z.zw.Close() }
