package api

import (
	"net/http"

	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// listSort reads the sort and order query parameters of a directory listing. The server sorts
// (a bounded top-k, see files.List): a page costs offset+limit entries of memory however large
// the directory is, so offset+limit ≤ list_max_window bounds it. Only the default order, name
// ascending, pages with after=; the others page by offset.
func listSort(r *http.Request) (files.SortKey, bool, error) {
	q := r.URL.Query()
	by, ok := files.ParseSortKey(q.Get("sort"))
	if !ok {
		return "", false, badField("sort", "must be name, size or time")
	}
	var desc bool
	switch q.Get("order") {
	case "", "asc":
	case "desc":
		desc = true
	default:
		return "", false, badField("order", "must be asc or desc")
	}
	if q.Get("after") != "" && (desc || by != files.SortName) {
		return "", false, badField("after", "pages a listing sorted by name ascending only: page other orders with offset")
	}
	return by, desc, nil
}

// objectListSort refuses an order other than name ascending on an S3 system, whose listing
// comes from the bucket page by page in key order (sorting it would mean listing it whole).
func objectListSort(r *http.Request) error {
	by, desc, err := listSort(r)
	if err != nil {
		return err
	}
	if desc || by != files.SortName {
		return badField("sort", "an S3 system lists in name order only (sort=name, order=asc)")
	}
	return nil
}

// snapshotID is the identity kept directory listings are shared under: the system and the
// remote account and credential version the listing ran as.
func snapshotID(t sshpool.Target) string {
	return t.Key.System + "\x00" + t.Key.User + "\x00" + t.Key.Credential
}

// snapshotOwner is the share a kept listing's memory is charged to: the pool's owner of the
// connection (the system when the pool names none), as sshpool counts connections.
func snapshotOwner(t sshpool.Target) string {
	if t.Key.Owner != "" {
		return t.Key.Owner
	}
	return t.Key.System
}
