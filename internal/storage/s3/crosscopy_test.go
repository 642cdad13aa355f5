package s3

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/storage"
)

// TestCopyFrom: a file of one bucket is copied into another bucket of the same server on the
// server, the copy carrying the SHA-256 the server computed of it (for a source uploaded in
// parts too); a source changed since its ETag was read is refused with ErrChanged and nothing is
// copied; a bucket on another server, or reached with another credential, is not copied from.
func TestCopyFrom(t *testing.T) {
	srv := s3test.New(t)
	newB := func(t *testing.T, srv *s3test.Server, bucket, secret string) *Backend {
		b, err := New(Config{Endpoint: srv.Endpoint, Bucket: bucket, PathStyle: true, AccessKeyID: srv.AccessKeyID, SecretAccessKey: secret})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	src := newB(t, srv, srv.Bucket(t), srv.SecretAccessKey)
	dst := newB(t, srv, srv.Bucket(t), srv.SecretAccessKey)
	ctx := t.Context()
	content := make([]byte, 2*minPart+999)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range content {
		content[i] = byte(rng.Uint32())
	}
	up, err := src.Create(ctx, "/d/a.bin", storage.UploadOptions{Size: int64(len(content))})
	if err != nil {
		t.Fatal(err)
	}
	for n, off := 1, 0; off < len(content); n, off = n+1, off+minPart {
		p := content[off:min(off+minPart, len(content))]
		sum := sha256.Sum256(p)
		if err := up.WritePart(ctx, n, int64(off), bytes.NewReader(p), int64(len(p)), sum[:]); err != nil {
			t.Fatal(err)
		}
	}
	se, err := up.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := dst.CopyFrom(ctx, src, "/d/a.bin", "/copy/a.bin", se.ETag)
	if err != nil || !ok {
		t.Fatalf("copy: ok %v, %v", ok, err)
	}
	want := sha256.Sum256(content)
	if e.Size != int64(len(content)) || e.Checksum != base64.StdEncoding.EncodeToString(want[:]) {
		t.Fatalf("copy %+v: want %d bytes with the full SHA-256 %s", e, len(content), base64.StdEncoding.EncodeToString(want[:]))
	}
	rc, err := dst.Open(ctx, "/copy/a.bin", 0, -1, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("the copy reads back %d bytes, differ: %v", len(got), err)
	}

	if _, ok, err := dst.CopyFrom(ctx, src, "/d/a.bin", "/copy/b.bin", `"0123"`); !ok || !errors.Is(err, storage.ErrChanged) {
		t.Fatalf("copy of another version: ok %v, %v; want storage.ErrChanged", ok, err)
	}
	if _, err := dst.Stat(ctx, "/copy/b.bin"); err == nil {
		t.Fatal("a refused copy left an object")
	}

	other := s3test.New(t)
	for name, b := range map[string]*Backend{
		"other credential": newB(t, srv, dst.Bucket(), "another secret"),
		"other server":     newB(t, other, other.Bucket(t), other.SecretAccessKey),
	} {
		if _, ok, err := b.CopyFrom(ctx, src, "/d/a.bin", "/c.bin", ""); ok || err != nil {
			t.Fatalf("%s: ok %v, %v; want not ok", name, ok, err)
		}
	}
}
