package api

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/sshapi/sshapi/internal/storage"
)

// archivePage is how many entries of one directory level an archive walk holds at once.
const archivePage = 1000

// writeObjectArchive streams prefix dir of st to w as a tar, tar.gz or zip archive named
// "<name>/<relative path>", walking the prefix page by page (depth first; memory is one page
// per level) and reading each object once. A bucket has no links, so every key the walk meets
// is below dir. An object that changes size while it is read fails the archive.
func writeObjectArchive(ctx context.Context, st storage.Backend, dir, name, format string, w io.Writer) error {
	var add func(e *storage.Entry, rel string) error
	var finish func() error
	switch format {
	case "zip":
		zw := zip.NewWriter(w)
		add = func(e *storage.Entry, rel string) error {
			if e.Type == storage.TypeDir {
				_, err := zw.CreateHeader(&zip.FileHeader{Name: rel + "/", Method: zip.Store, Modified: e.ModTime})
				return err
			}
			fw, err := zw.CreateHeader(&zip.FileHeader{Name: rel, Method: zip.Deflate, Modified: e.ModTime})
			if err != nil {
				return err
			}
			return copyObject(ctx, st, e, fw)
		}
		finish = zw.Close
	case "tar", "tar.gz":
		out := w
		var gz *gzip.Writer
		if format == "tar.gz" {
			gz = gzip.NewWriter(w)
			out = gz
		}
		tw := tar.NewWriter(out)
		add = func(e *storage.Entry, rel string) error {
			h := &tar.Header{Name: rel, Mode: 0o644, ModTime: e.ModTime, Size: e.Size, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
			if e.Type == storage.TypeDir {
				h.Name, h.Mode, h.Size, h.Typeflag = rel+"/", 0o755, 0, tar.TypeDir
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if e.Type == storage.TypeDir {
				return nil
			}
			return copyObject(ctx, st, e, tw)
		}
		finish = func() error {
			if err := tw.Close(); err != nil {
				return err
			}
			if gz != nil {
				return gz.Close()
			}
			return nil
		}
	default:
		return fmt.Errorf("archive format %q", format)
	}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		if err := add(&storage.Entry{Path: dir, Type: storage.TypeDir}, rel); err != nil {
			return err
		}
		cursor := ""
		for {
			pg, err := st.List(ctx, dir, cursor, archivePage)
			if err != nil {
				return objErr(err)
			}
			for i := range pg.Entries {
				e := &pg.Entries[i]
				if strings.Contains(e.Name, "/") || e.Name == "." || e.Name == ".." {
					continue // not a name an archive can hold safely
				}
				r := path.Join(rel, e.Name)
				if e.Type == storage.TypeDir {
					if err := walk(e.Path, r); err != nil {
						return err
					}
					continue
				}
				if err := add(e, r); err != nil {
					return err
				}
			}
			if cursor = pg.Next; cursor == "" {
				return nil
			}
		}
	}
	if err := walk(dir, name); err != nil {
		return err
	}
	return finish()
}

// copyObject writes e's content to w, exactly e.Size bytes of version e.ETag (the archive's
// header for it has that size: a file replaced since it was listed fails the archive rather
// than filling the entry with the start of another version).
func copyObject(ctx context.Context, st storage.Backend, e *storage.Entry, w io.Writer) error {
	rc, err := st.Open(ctx, e.Path, 0, e.Size, e.ETag)
	if err != nil {
		return objErr(err)
	}
	defer rc.Close()
	if _, err := io.CopyN(w, rc, e.Size); err != nil {
		return fmt.Errorf("archive %s: %w", e.Path, err)
	}
	return nil
}
