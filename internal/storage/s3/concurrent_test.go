package s3

import (
	"context"
	"errors"
	"io"
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

// isCopyObject is a CopyObject request.
func isCopyObject(r *http.Request) bool {
	return r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "" && !r.URL.Query().Has("uploadId")
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
			after: isCopyObject, key: "d/src",
			op:   func(ctx context.Context, b *Backend) error { return b.Rename(ctx, "/d/src", "/d/dst", false) },
			want: storage.ErrChanged,
		},
		{
			// A non-recursive removal of an empty directory (its marker only) must not sweep a
			// file the owner put in it after the emptiness check.
			name: "remove of an empty directory, file added after the check", setup: map[string]string{"d/empty/": ""},
			after: isEmptinessCheck, key: "d/empty/new.txt",
			op: func(ctx context.Context, b *Backend) error { return b.Remove(ctx, "/d/empty", false) },
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
