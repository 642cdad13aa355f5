package files

import (
	"archive/tar"
	"archive/zip"
	"compress/flate"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"path"
	"strings"
)

// MaxArchiveNames bounds the entries one WriteArchiveOf names.
const MaxArchiveNames = 1000

// newArchiveSink returns the sink writing format ("tar", "tar.gz" or "zip") to w.
func newArchiveSink(format string, w io.Writer) (archiveSink, error) {
	switch format {
	case "tar":
		return &tarSink{tw: tar.NewWriter(w)}, nil
	case "tar.gz":
		// BestSpeed: the archive is built on a gateway serving many users at once.
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // the level is valid
		return &tarSink{tw: tar.NewWriter(gz), gz: gz}, nil
	case "zip":
		zw := zip.NewWriter(w)
		zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
			return flate.NewWriter(out, flate.BestSpeed)
		})
		return &zipSink{zw: zw}, nil
	}
	return nil, fmt.Errorf("unknown archive format %q (want tar, tar.gz or zip)", format)
}

// CheckArchiveNames reports whether names can be a selection of WriteArchiveOf: 1 to
// MaxArchiveNames plain names of entries of one directory (no slash, ".", ".." or NUL), each
// once.
func CheckArchiveNames(names []string) error {
	if len(names) == 0 || len(names) > MaxArchiveNames {
		return fmt.Errorf("between 1 and %d names", MaxArchiveNames)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !plainName([]byte(n)) || strings.IndexByte(n, 0) >= 0 {
			return fmt.Errorf("%q is not the name of an entry of the directory", n)
		}
		if seen[n] {
			return fmt.Errorf("%q is named twice", n)
		}
		seen[n] = true
	}
	return nil
}

// WriteArchiveOf streams the named entries of directory dir (files or whole directories) to w
// as one archive, as WriteArchive does for one: entries are named "<name>/<relative path>", in
// the order given, memory bounded the same way.
func (f *FS) WriteArchiveOf(ctx context.Context, dir string, names []string, format string, w io.Writer) error {
	const op = "archive"
	abs, err := f.resolve(ctx, op, dir, true)
	if err != nil {
		return err
	}
	if err := CheckArchiveNames(names); err != nil {
		return newErr(op, abs, ErrInvalid, err)
	}
	sink, err := newArchiveSink(format, w)
	if err != nil {
		return newErr(op, abs, ErrInvalid, err)
	}
	for _, n := range names {
		p := path.Join(abs, n)
		if err := checkCtx(ctx, op, p); err != nil {
			return err
		}
		fi, err := f.c.Lstat(p)
		if err != nil {
			return wrap(op, p, err)
		}
		if err := f.archiveEntry(ctx, op, sink, p, n, fi); err != nil {
			return err
		}
	}
	if err := sink.close(); err != nil {
		return wrap(op, abs, err)
	}
	return nil
}
