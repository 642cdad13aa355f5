package s3

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/storage"
)

// hookTransport forwards every request to the real server. Before the first request that match
// accepts, it runs do: another principal (the owner, with a client of their own) acting at
// exactly that moment of an operation that takes several requests.
type hookTransport struct {
	match func(*http.Request) bool
	do    func()
	once  sync.Once
}

func (h *hookTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.match != nil && h.match(r) {
		h.once.Do(h.do)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// isDeleteObject is a DeleteObject request (DELETE of a key, no upload id).
func isDeleteObject(r *http.Request) bool {
	return r.Method == http.MethodDelete && !r.URL.Query().Has("uploadId")
}

// TestConcurrentWriteSurvives: a backend operation made of several requests never destroys
// what another principal wrote between them. Each case runs op on a backend whose transport
// lets the owner write key (directly, with a client of their own) just before the request
// match names, then checks that the owner's object is still there with its content.
func TestConcurrentWriteSurvives(t *testing.T) {
	srv := s3test.New(t)
	for _, tc := range []struct {
		name  string
		setup map[string]string // keys stored before op
		match func(*http.Request) bool
		key   string // what the owner writes meanwhile
		op    func(ctx context.Context, b *Backend) error
		want  error // op's error (nil: succeeds)
	}{
		{
			// The move copied the old version; the owner's new version at the source must not
			// be deleted with it (it was never copied anywhere).
			name: "rename, source overwritten before its delete", setup: map[string]string{"d/src": "old"},
			match: isDeleteObject, key: "d/src",
			op:   func(ctx context.Context, b *Backend) error { return b.Rename(ctx, "/d/src", "/d/dst", false) },
			want: storage.ErrChanged,
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
			hook := &hookTransport{match: tc.match, do: func() { put(tc.key, theirs) }}
			b, err := New(Config{Endpoint: srv.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey,
				HTTPClient: &http.Client{Transport: hook}})
			if err != nil {
				t.Fatal(err)
			}
			err = tc.op(ctx, b)
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
