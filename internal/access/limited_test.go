package access

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/storage/s3"
)

// TestOwnerS3Slots: an owner's S3 requests in flight are bounded by its slots (an open reader
// holds one until closed); another owner's requests are not held up by them.
func TestOwnerS3Slots(t *testing.T) {
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	b, err := s3.New(s3.Config{Endpoint: gw.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: gw.AccessKeyID, SecretAccessKey: gw.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{S3: S3Config{MaxRequestsPerOwner: 1}}, Deps{})
	alice := &limited{Backend: b, slots: r.s3Slots, owner: "alice"}
	bob := &limited{Backend: b, slots: r.s3Slots, owner: "bob"}
	ctx := t.Context()
	up, err := alice.Create(ctx, "/f", storage.UploadOptions{Size: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.WritePart(ctx, 1, 0, strings.NewReader("hello"), 5, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rc, err := alice.Open(ctx, "/f", 0, -1, "") // holds alice's only slot
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := alice.Stat(short, "/f"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("alice's second request while her slot is held: %v, want to wait", err)
	}
	if _, err := bob.Stat(ctx, "/f"); err != nil {
		t.Fatalf("bob waits for alice's slots: %v", err)
	}
	if b, _ := io.ReadAll(rc); string(b) != "hello" {
		t.Fatalf("read %q", b)
	}
	rc.Close()
	rc.Close() // a second Close releases nothing more
	if _, err := alice.Stat(ctx, "/f"); err != nil {
		t.Fatalf("alice after closing: %v", err)
	}
	if n := r.s3Slots.Owners(); n != 0 {
		t.Fatalf("%d owners' slots kept with no request in flight", n)
	}
	// A wait for a slot is bounded: then the request is refused as busy.
	waiting := &limited{Backend: b, slots: r.s3Slots, wait: 100 * time.Millisecond, owner: "carol"}
	held, err := waiting.Open(ctx, "/f", 0, -1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := waiting.Stat(ctx, "/f"); !errors.Is(err, ErrBusy) {
		t.Fatalf("a request past the slot wait: %v, want ErrBusy", err)
	}
}

// TestS3SlotsForgetIdleOwners: after many owners each used S3 (a stat, and a download read and
// closed), the resolver keeps no S3 slots for any of them.
func TestS3SlotsForgetIdleOwners(t *testing.T) {
	kr := testKeyring(t)
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	s := newStore(t)
	r := New(Config{}, Deps{Store: s, Keyring: kr})
	const owners = 50
	for i := range owners {
		owner := fmt.Sprintf("u%d", i)
		addSystem(t, s, kr, owner, "b", gw, bucket)
		b := use(t, r, owner, "b").(storage.Backend)
		up, err := b.Create(t.Context(), "/"+owner, storage.UploadOptions{Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := up.WritePart(t.Context(), 1, 0, strings.NewReader("hi"), 2, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := up.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		rc, err := b.Open(t.Context(), "/"+owner, 0, -1, "")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(rc)
		rc.Close()
	}
	if n := r.s3Slots.Owners(); n != 0 {
		t.Fatalf("%d of %d owners' S3 slots kept with none of their requests in flight", n, owners)
	}
}

// inflight is a real backend that records the most Stat calls it ever ran at once.
type inflight struct {
	storage.Backend
	now, most atomic.Int64
}

func (f *inflight) Stat(ctx context.Context, p string) (*storage.Entry, error) {
	n := f.now.Add(1)
	defer f.now.Add(-1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	return f.Backend.Stat(ctx, p)
}

// TestS3SlotsHoldUnderChurn: owners whose slots are dropped and made again all the time (each
// request takes one and gives it back, often leaving none held) never run more requests at
// once than their share, nor all owners more than the server's slots; and every slot is given
// back in the end.
func TestS3SlotsHoldUnderChurn(t *testing.T) {
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	b, err := s3.New(s3.Config{Endpoint: gw.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: gw.AccessKeyID, SecretAccessKey: gw.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	up, err := b.Create(t.Context(), "/f", storage.UploadOptions{Size: 1})
	if err == nil {
		err = up.WritePart(t.Context(), 1, 0, strings.NewReader("x"), 1, nil)
	}
	if err == nil {
		_, err = up.Commit(t.Context())
	}
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                string
		owners, share, most int
	}{
		{"owners' shares", 3, 2, 100},
		{"server's slots", 4, 2, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Config{S3: S3Config{MaxRequestsPerOwner: tt.share, MaxRequests: tt.most}}, Deps{})
			all := &inflight{Backend: b}
			var wg sync.WaitGroup
			mine := make([]*inflight, tt.owners)
			for o := range tt.owners {
				mine[o] = &inflight{Backend: all}
				l := &limited{Backend: mine[o], slots: r.s3Slots, owner: fmt.Sprintf("o%d", o)}
				for range 2 * tt.share {
					wg.Go(func() {
						for range 40 {
							if _, err := l.Stat(t.Context(), "/f"); err != nil { // one HEAD request
								t.Error(err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			for o, f := range mine {
				if m := f.most.Load(); m > int64(tt.share) {
					t.Errorf("owner %d had %d requests in flight, share %d", o, m, tt.share)
				}
			}
			if m := all.most.Load(); m > int64(tt.most) || m < 2 {
				t.Errorf("%d requests in flight over all owners, server's slots %d (and the test means to run several at once)", m, tt.most)
			}
			if n := r.s3Slots.Owners(); n != 0 {
				t.Errorf("%d owners' slots kept after every request ended", n)
			}
		})
	}
}

// TestOwnerS3SlotsEveryRequest: every request an owner's backend makes holds one of the owner's
// slots, those of a resumed upload (the transfer engine's after a restart, the temp keeper's
// reaping) and of starting an upload for its ID included: with alice's only slot held, each
// waits.
func TestOwnerS3SlotsEveryRequest(t *testing.T) {
	gw := s3test.New(t)
	b, err := s3.New(s3.Config{Endpoint: gw.Endpoint, Bucket: gw.Bucket(t), PathStyle: true, AccessKeyID: gw.AccessKeyID, SecretAccessKey: gw.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	r := New(Config{S3: S3Config{MaxRequestsPerOwner: 1}}, Deps{})
	alice := &limited{Backend: b, slots: r.s3Slots, owner: "alice"}
	if err := alice.Mkdir(ctx, "/held", false); err != nil {
		t.Fatal(err)
	}
	// started is an upload to p with a multipart upload on the server, and its id.
	started := func(t *testing.T, p string) (storage.Upload, string) {
		up, err := alice.Create(ctx, p, storage.UploadOptions{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		id, err := up.ID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = up.Abort(context.WithoutCancel(ctx)) })
		return up, id
	}
	resumed := func(t *testing.T, p string) storage.Upload {
		_, id := started(t, p)
		up, err := alice.Resume(ctx, p, id, nil, storage.UploadOptions{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		return up
	}
	for _, tc := range []struct {
		name string
		// prepare runs before alice's slot is taken; the request it returns runs while it is.
		prepare func(t *testing.T) func(ctx context.Context) error
	}{
		{"resume", func(t *testing.T) func(context.Context) error {
			_, id := started(t, "/resume")
			return func(ctx context.Context) error {
				_, err := alice.Resume(ctx, "/resume", id, nil, storage.UploadOptions{Size: -1})
				return err
			}
		}},
		{"part of a resumed upload", func(t *testing.T) func(context.Context) error {
			up := resumed(t, "/part")
			return func(ctx context.Context) error { return up.WritePart(ctx, 1, 0, strings.NewReader("x"), 1, nil) }
		}},
		{"commit of a resumed upload", func(t *testing.T) func(context.Context) error {
			up := resumed(t, "/commit")
			return func(ctx context.Context) error { _, err := up.Commit(ctx); return err }
		}},
		{"abort of a resumed upload", func(t *testing.T) func(context.Context) error {
			up := resumed(t, "/abort")
			return func(ctx context.Context) error { return up.Abort(ctx) }
		}},
		{"id of a new upload", func(t *testing.T) func(context.Context) error {
			up, err := alice.Create(ctx, "/id", storage.UploadOptions{Size: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = up.Abort(context.WithoutCancel(ctx)) })
			return func(ctx context.Context) error { _, err := up.ID(ctx); return err }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.prepare(t)
			rc, err := alice.Open(ctx, "/held/", 0, 0, "") // holds alice's only slot
			if err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err = req(short)
			cancel()
			rc.Close()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("with alice's only slot held: %v, want to wait for it", err)
			}
		})
	}
}
