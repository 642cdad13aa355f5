package access

import (
	"context"
	"errors"
	"io"
	"strings"
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
	alice := &limited{Backend: b, sem: r.ownerSlots("alice")}
	bob := &limited{Backend: b, sem: r.ownerSlots("bob")}
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
	rc, err := alice.Open(ctx, "/f", 0, -1) // holds alice's only slot
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
	if len(r.ownerSlots("alice")) != 0 {
		t.Fatal("a slot leaked")
	}
	// A wait for a slot is bounded: then the request is refused as busy.
	waiting := &limited{Backend: b, sem: r.ownerSlots("carol"), wait: 100 * time.Millisecond, owner: "carol"}
	held, err := waiting.Open(ctx, "/f", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := waiting.Stat(ctx, "/f"); !errors.Is(err, ErrBusy) {
		t.Fatalf("a request past the slot wait: %v, want ErrBusy", err)
	}
}
