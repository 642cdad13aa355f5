package s3

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/storage"
)

// rewriteTransport forwards every request to the real server and replaces, in the body of each
// listing's answer, every old with its new: the keys another S3 server (or another tool) could
// hold, where versitygw cannot store them.
type rewriteTransport struct{ old, new []string }

func (rt rewriteTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Method != http.MethodGet || r.URL.Query().Get("list-type") != "2" {
		return res, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	for i := range rt.old {
		b = bytes.ReplaceAll(b, []byte(rt.old[i]), []byte(rt.new[i]))
	}
	res.Body = io.NopCloser(bytes.NewReader(b))
	res.ContentLength = int64(len(b))
	res.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return res, nil
}

// TestListDropsDotNames: keys that AWS S3 stores literally but no path can name — "d/../x",
// "d/./x", a file "d/.." — are left out of a listing of d, so a walk (transfers, archives,
// recursive deletes) that joins d with an entry's name never climbs out of d: before, the
// entry named ".." had the path "/".
func TestListDropsDotNames(t *testing.T) {
	srv := s3test.New(t)
	bucket := srv.Bucket(t)
	plain, err := New(Config{Endpoint: srv.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, p := range []string{"/d/keep", "/d/up/x", "/d/here/x", "/d/dots"} {
		up, err := plain.Create(ctx, p, storage.UploadOptions{Size: 1})
		if err == nil {
			err = up.WritePart(ctx, 1, 0, strings.NewReader("x"), 1, nil)
		}
		if err == nil {
			_, err = up.Commit(ctx)
		}
		if err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	b, err := New(Config{Endpoint: srv.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
		HTTPClient: &http.Client{Transport: rewriteTransport{old: []string{"<Prefix>d/up/</Prefix>", "<Prefix>d/here/</Prefix>", "<Key>d/dots</Key>"},
			new: []string{"<Prefix>d/../</Prefix>", "<Prefix>d/./</Prefix>", "<Key>d/..</Key>"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pg, err := b.List(ctx, "/d", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range pg.Entries {
		names = append(names, e.Name)
		if !strings.HasPrefix(e.Path, "/d/") {
			t.Errorf("entry %q has the path %q, outside /d", e.Name, e.Path)
		}
	}
	if strings.Join(names, ",") != "keep" {
		t.Fatalf("listing of /d: %v, want only keep", names)
	}
}
