package s3

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/storage"
)

// hookTransport forwards every request to the real server. Once the first request that after
// accepts has been answered, it runs do: another principal (the owner, with a client of their
// own) acting at exactly that moment of an operation that takes several requests.
type hookTransport struct {
	after func(*http.Request) bool
	do    func()
	once  sync.Once
	ran   atomic.Bool
}

func (h *hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && h.after(r) {
		h.once.Do(func() { h.do(); h.ran.Store(true) })
	}
	return res, err
}

// isCopied is the request that makes a copy's destination: CopyObject, or the completion of
// the multipart upload of a copy made part by part.
func isCopied(r *http.Request) bool {
	copyObject := r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "" && !r.URL.Query().Has("uploadId")
	return copyObject || (r.Method == http.MethodPost && r.URL.Query().Has("uploadId"))
}

// isHead is a HeadObject request for key.
func isHead(key string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodHead && strings.HasSuffix(r.URL.Path, "/"+key)
	}
}

// isEmptinessCheck is the listing of at most two keys a non-recursive removal checks with.
func isEmptinessCheck(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2" && r.URL.Query().Get("max-keys") == "2"
}

// TestConcurrentWriteSurvives: a backend operation made of several requests never destroys
// what another principal wrote between them. Each case runs op on a backend whose transport
// lets the owner write key (directly, with a client of their own) right after the request
// after names, then checks that the owner's object is still there with its content.
func TestConcurrentWriteSurvives(t *testing.T) {
	srv := s3test.New(t)
	for _, tc := range []struct {
		name  string
		setup map[string]string        // keys stored before op
		after func(*http.Request) bool // the owner writes once this request is answered
		key   string                   // what the owner writes
		op    func(ctx context.Context, b *Backend) error
		want  error // op's error (nil: succeeds)
	}{
		{
			// The move copied the old version; the owner's new version at the source must not
			// be deleted with it (it was never copied anywhere).
			name: "rename, source overwritten before its delete", setup: map[string]string{"d/src": "old"},
			after: isCopied, key: "d/src",
			op:   func(ctx context.Context, b *Backend) error { return b.Rename(ctx, "/d/src", "/d/dst", false) },
			want: storage.ErrChanged,
		},
		{
			name: "rename replacing the destination, source overwritten before its delete", setup: map[string]string{"d/src": "old", "d/dst": "replaced"},
			after: isCopied, key: "d/src",
			op:   func(ctx context.Context, b *Backend) error { return b.Rename(ctx, "/d/src", "/d/dst", true) },
			want: storage.ErrChanged,
		},
		{
			// A non-recursive removal of an empty directory (its marker only) must not sweep a
			// file the owner put in it after the emptiness check.
			name: "remove of an empty directory, file added after the check", setup: map[string]string{"d/empty/": ""},
			after: isEmptinessCheck, key: "d/empty/new.txt",
			op: func(ctx context.Context, b *Backend) error { return b.Remove(ctx, "/d/empty", false) },
		},
		{
			// A copy that may not overwrite must not replace what the owner put at the
			// destination after it was checked to be free.
			name: "copy without overwrite, destination written after the check", setup: map[string]string{"d/src": "mine"},
			after: isHead("d/dst"), key: "d/dst",
			op:   func(ctx context.Context, b *Backend) error { return b.Copy(ctx, "/d/src", "/d/dst", false) },
			want: fs.ErrExist,
		},
		{
			name: "rename without overwrite, destination written after the check", setup: map[string]string{"d/src": "mine"},
			after: isHead("d/dst"), key: "d/dst",
			op:   func(ctx context.Context, b *Backend) error { return b.Rename(ctx, "/d/src", "/d/dst", false) },
			want: fs.ErrExist,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			bucket := srv.Bucket(t)
			owner, err := New(Config{Endpoint: srv.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
			if err != nil {
				t.Fatal(err)
			}
			put := func(key, body string) {
				if _, err := owner.c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
					t.Fatalf("put %s: %v", key, err)
				}
			}
			for k, v := range tc.setup {
				put(k, v)
			}
			const theirs = "the owner's new content"
			hook := &hookTransport{after: tc.after, do: func() { put(tc.key, theirs) }}
			b, err := New(Config{Endpoint: srv.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
				HTTPClient: &http.Client{Transport: hook}})
			if err != nil {
				t.Fatal(err)
			}
			err = tc.op(ctx, b)
			if !hook.ran.Load() {
				t.Fatal("the owner's write never ran: the operation made no request the case waits for")
			}
			if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("op: %v, want %v", err, tc.want)
			}
			out, err := owner.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(tc.key)})
			if err != nil {
				t.Fatalf("the owner's %s written meanwhile is gone: %v", tc.key, err)
			}
			got, err := io.ReadAll(out.Body)
			out.Body.Close()
			if err != nil || string(got) != theirs {
				t.Fatalf("%s holds %q (%v), want the owner's %q", tc.key, got, err, theirs)
			}
		})
	}
}

// TestCopyWithoutOverwrite: a copy that may not replace its destination (a multipart upload of
// copied parts, completed with If-None-Match) copies every kind of source whole: an empty one,
// a small one, and one that is itself a multipart object (whose composite checksum the server
// reports for a copied part); and it refuses an existing destination.
func TestCopyWithoutOverwrite(t *testing.T) {
	srv := s3test.New(t)
	b, err := New(Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket(t), PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	write := func(p, body string, parts bool) {
		up, err := b.Create(ctx, p, storage.UploadOptions{Size: int64(len(body))})
		if err == nil && parts {
			_, err = up.ID(ctx) // a multipart upload even for a small body
		}
		if err == nil {
			err = up.WritePart(ctx, 1, 0, strings.NewReader(body), int64(len(body)), nil)
		}
		if err == nil {
			_, err = up.Commit(ctx)
		}
		if err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	for _, tc := range []struct {
		name, body string
		multipart  bool
	}{
		{"empty", "", false},
		{"small", "hello", false},
		{"multipart", "parts", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := "/"+tc.name+"/src", "/"+tc.name+"/dst"
			write(src, tc.body, tc.multipart)
			if err := b.Copy(ctx, src, dst, false); err != nil {
				t.Fatalf("copy: %v", err)
			}
			rc, err := b.Open(ctx, dst, 0, -1, "")
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || string(got) != tc.body {
				t.Fatalf("copy holds %q (%v), want %q", got, err, tc.body)
			}
			if err := b.Copy(ctx, src, dst, false); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("copy onto the copy: %v, want fs.ErrExist", err)
			}
			// A copy of the copy: a source made of copied parts.
			if err := b.Rename(ctx, dst, dst+"2", false); err != nil {
				t.Fatalf("move of the copy: %v", err)
			}
		})
	}
}
