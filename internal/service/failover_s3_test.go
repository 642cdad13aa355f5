package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestFailoverToS3: a multipart SFTP→S3 transfer runs on instance A; A is killed with SIGKILL;
// instance B resumes the same multipart upload once the lease expires (its parts confirmed with
// ListParts, not sent again beyond those in flight), and the object's SHA-256 is the source's,
// with no incomplete multipart upload left.
func TestFailoverToS3(t *testing.T) {
	const size, rate, streams, chunk = int64(96 << 20), int64(16 << 20), 4, int64(8 << 20)
	d := newDeployment(t)
	srv := sshtest.New(t, sshtest.Options{})
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	a := d.start("a")
	d.addSystem(a, "src", srv, slowLink(t, srv, rate))
	d.mustCall(a, "POST", "/v1/systems", map[string]any{"id": "bkt", "kind": "s3", "endpoint": gw.Endpoint, "bucket": bucket, "path_style": true}, nil)
	d.mustCall(a, "PUT", "/v1/systems/bkt/credential", map[string]any{"access_key_id": gw.AccessKeyID, "secret_access_key": gw.SecretAccessKey}, nil)
	src := filepath.Join(srv.MkTemp(t), "big.bin")
	want := writeRandom(t, src, size)
	owned(t, srv, src)
	var tr transferJSON
	d.mustCall(a, "POST", "/v1/transfers", map[string]any{"source": map[string]any{"system": "src", "path": src},
		"destination": map[string]any{"system": "bkt", "path": "/run/big.bin"}, "streams": streams, "chunk_size": chunk}, &tr)
	before := d.await(a, tr.ID, 2*time.Minute, func(x transferJSON) bool { return x.BytesDone >= size/2 })
	b := d.start("b")
	a.kill()
	d.await(b, tr.ID, 2*time.Minute, func(x transferJSON) bool { return x.Attempts >= 2 })
	done := d.await(b, tr.ID, 5*time.Minute, func(x transferJSON) bool { return x.Status == "succeeded" })

	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(gw.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(gw.AccessKeyID, gw.SecretAccessKey, "")})
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("run/big.bin")})
	if err != nil {
		t.Fatalf("the object: %v", err)
	}
	h := sha256.New()
	_, err = io.Copy(h, out.Body)
	out.Body.Close()
	if got := hex.EncodeToString(h.Sum(nil)); err != nil || got != want {
		t.Fatalf("sha256 of the object %s (%v), want %s", got, err, want)
	}
	ups, err := c.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("incomplete multipart uploads left: %v %v", ups, err)
	}
	// bytes_read counts every part read to the end, in every run. Read again after the kill:
	// finished parts past the hashed prefix (at most the streams' worth), never what A had
	// finished (a restart from zero would read all of it again).
	reread := done.BytesRead - size
	t.Logf("failover to S3: %d MiB in %d MiB parts, %d streams; killed at bytes_done %d; bytes_read - size = %d (%.2f parts)",
		size>>20, chunk>>20, streams, before.BytesDone, reread, float64(reread)/float64(chunk))
	if reread < 0 || reread > streams*chunk || reread >= before.BytesDone {
		t.Fatalf("re-read %d bytes after the kill (finished before it: %d; at most %d expected)", reread, before.BytesDone, streams*chunk)
	}
}
