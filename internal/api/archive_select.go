package api

import (
	"net/http"
	"path"
	"time"

	"github.com/sshapi/sshapi/internal/files"
)

// archiveNames reads the name parameters of GET content/{dir}?archive=…&name=a&name=b: a
// selection of the directory's entries downloaded as one archive. nil when there are none.
func archiveNames(r *http.Request, archive string) ([]string, error) {
	names, ok := r.URL.Query()["name"]
	if !ok {
		return nil, nil
	}
	if archive == "" {
		return nil, badField("archive", "is required with name: tar, tar.gz or zip")
	}
	if err := files.CheckArchiveNames(names); err != nil {
		return nil, badField("name", "%v", err)
	}
	return names, nil
}

// writeSelection streams the entries names of directory dir as one archive named after the
// directory, in constant memory, as a directory's archive is (see getContent).
func (s *Server) writeSelection(w http.ResponseWriter, r *http.Request, fsys *files.FS, dir *files.Entry, names []string, archive string) error {
	if dir.Type != files.TypeDir {
		return badField("name", "selects entries of a directory, and %s is not one", dir.Path)
	}
	dw := s.newDeadlineWriter(w, time.Time{})
	defer dw.done()
	types := map[string]string{"tar": "application/x-tar", "tar.gz": "application/gzip", "zip": "application/zip"}
	w.Header().Set("Content-Type", types[archive])
	w.Header().Set("Content-Disposition", contentDisposition(path.Base(dir.Path)+"-selection."+archive))
	w.WriteHeader(http.StatusOK)
	// As for a directory: an error after the headers leaves a truncated, invalid archive.
	return fsys.WriteArchiveOf(r.Context(), dir.Path, names, archive, dw)
}
