package study

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/s3test"
)

// s3Lab is the S3 server of a transfer bench: a throwaway versitygw (posix backend, in the
// lab's scratch directory) with one bucket. Close stops it.
type s3Lab struct {
	srv    *s3test.Server
	bucket string
	client *s3.Client
}

// startS3Lab starts versitygw under the lab's scratch directory and creates the bench bucket.
func (l *lab) startS3(ctx context.Context) (*s3Lab, error) {
	dir := filepath.Join(l.tmp, "s3")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("s3 dir: %w", err)
	}
	srv, err := s3test.Start(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &s3Lab{srv: srv, bucket: "bench-" + hex.EncodeToString(b),
		client: s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
			Credentials:                credentials.NewStaticCredentialsProvider(srv.AccessKeyID, srv.SecretAccessKey, ""),
			RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired})}
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.bucket}); err != nil {
		srv.Stop()
		return nil, fmt.Errorf("create bucket: %w", err)
	}
	return s, nil
}

// Close stops the server.
func (s *s3Lab) Close() { s.srv.Stop() }

// system registers the bucket with api as S3 system id, reached over the path (through a wanem
// proxy of its own when the path is emulated), and returns how the bench reaches it.
func (p *pathEnds) s3System(ctx context.Context, api *bench.API, s *s3Lab, id string) (bench.S3Endpoint, error) {
	u, err := url.Parse(s.srv.Endpoint)
	if err != nil {
		return bench.S3Endpoint{}, fmt.Errorf("s3 endpoint: %w", err)
	}
	host, port, err := p.way(ctx, u.Host)
	if err != nil {
		return bench.S3Endpoint{}, err
	}
	endpoint := fmt.Sprintf("http://%s:%d", host, port)
	body := map[string]any{"id": id, "kind": "s3", "endpoint": endpoint, "region": "us-east-1", "bucket": s.bucket, "path_style": true}
	if err := api.Call(ctx, "POST", "/v1/systems", body, 201, nil); err != nil {
		return bench.S3Endpoint{}, fmt.Errorf("register s3 system %s: %w", id, err)
	}
	cred := map[string]any{"access_key_id": s.srv.AccessKeyID, "secret_access_key": s.srv.SecretAccessKey}
	if err := api.Call(ctx, "PUT", "/v1/systems/"+id+"/credential", cred, 200, nil); err != nil {
		return bench.S3Endpoint{}, fmt.Errorf("store s3 credential %s: %w", id, err)
	}
	return bench.S3Endpoint{System: id, Endpoint: endpoint, Bucket: s.bucket, Region: "us-east-1",
		AccessKeyID: s.srv.AccessKeyID, SecretAccessKey: s.srv.SecretAccessKey,
		Remove: func(ctx context.Context, key string) error {
			_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
			return err
		}}, nil
}
