package s3

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/storage/storagetest"
)

// TestContract runs the storage contract against a real S3 server (versitygw), each test on a
// bucket of its own, once at the bucket's top and once under a prefix.
func TestContract(t *testing.T) {
	srv := s3test.New(t)
	for _, prefix := range []string{"", "proj/42/"} {
		name := "bucket"
		if prefix != "" {
			name = "prefix"
		}
		t.Run(name, func(t *testing.T) {
			storagetest.Run(t, storagetest.Harness{
				New: func(t *testing.T) storage.Backend {
					b, err := New(Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket(t), Prefix: prefix, PathStyle: true,
						AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
					if err != nil {
						t.Fatal(err)
					}
					return b
				},
				Leftovers: func(t *testing.T, sb storage.Backend) int {
					b := sb.(*Backend)
					out, err := b.c.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: &b.bucket})
					if err != nil {
						t.Fatal(err)
					}
					return len(out.Uploads)
				},
			})
		})
	}
}
