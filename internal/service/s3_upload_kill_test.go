package service

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/s3test"
)

// TestS3UploadOfKilledInstanceIsAborted: a PUT to a bucket is sending a multipart upload when
// its instance is killed with SIGKILL; another instance's temp sweep aborts the upload once its
// record's lease lapses, so no incomplete multipart upload stays on the bucket.
func TestS3UploadOfKilledInstanceIsAborted(t *testing.T) {
	d := newDeployment(t)
	d.env = append(d.env, "SSHAPI_HTTP_TEMP_LEASE=2s", "SSHAPI_S3_PART_SIZE=5242880")
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	a := d.start("a")
	d.mustCall(a, "POST", "/v1/systems", map[string]any{"id": "bkt", "kind": "s3", "endpoint": gw.Endpoint, "bucket": bucket, "path_style": true}, nil)
	d.mustCall(a, "PUT", "/v1/systems/bkt/credential", map[string]any{"access_key_id": gw.AccessKeyID, "secret_access_key": gw.SecretAccessKey}, nil)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(gw.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(gw.AccessKeyID, gw.SecretAccessKey, "")})
	uploads := func() int {
		out, err := c.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Uploads)
	}

	// A body of unknown length: its first 5 MiB part starts a multipart upload; the rest never
	// comes, as the instance dies.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "PUT", a.url+"/v1/systems/bkt/content/run/big.bin", pr)
	req.Header.Set("Authorization", "Bearer "+d.token)
	go func() {
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	chunk := make([]byte, 6<<20)
	_, _ = rand.Read(chunk)
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	// Killed once a part is on the bucket: parts go only after the upload's record is committed
	// (a kill between CreateMultipartUpload's answer and that commit is the window not covered).
	parts := func() int {
		out, err := c.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Uploads) == 0 {
			return 0
		}
		ps, err := c.ListParts(context.Background(), &s3.ListPartsInput{Bucket: &bucket, Key: out.Uploads[0].Key, UploadId: out.Uploads[0].UploadId})
		if err != nil {
			return 0
		}
		return len(ps.Parts)
	}
	deadline := time.Now().Add(30 * time.Second)
	for parts() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no part of a multipart upload on the bucket")
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.kill()
	if n := uploads(); n != 1 {
		t.Fatalf("%d multipart uploads after the kill, want the 1 left behind", n)
	}

	d.start("b") // its sweep finds the lapsed record
	deadline = time.Now().Add(30 * time.Second)
	for uploads() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the killed instance's multipart upload is still on the bucket %v after its lease (2s) lapsed", 30*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
