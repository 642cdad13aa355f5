package api

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/store"
)

// TestS3PutUploadInTheLedger: a PUT to a bucket records its multipart upload (bucket, upload
// id, path) in the temporary-name ledger while it runs and forgets it once completed; a lapsed
// record of an upload nobody finishes is aborted by the sweep with the owner's credential.
func TestS3PutUploadInTheLedger(t *testing.T) {
	e := newS3Env(t)
	ctx := context.Background()
	lapsed := func() []store.TempFile { // every record, as if their leases had lapsed
		got, err := e.api.deps.Store.ClaimTemps(ctx, time.Now().Add(time.Hour), time.Now(), 10)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	pr, pw := io.Pipe()
	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "PUT", e.url+"/v1/systems/bkt/content/d/big.bin", pr)
		req.Header.Set("Authorization", "Bearer "+e.token("alice"))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- -1
			return
		}
		res.Body.Close()
		answered <- res.StatusCode
	}()
	chunk := make([]byte, 6<<20) // more than one 5 MiB part: a multipart upload
	_, _ = rand.Read(chunk)
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	awaitState(t, "the multipart upload to start", func() bool { return e.uploadsLeft() == 1 })
	out, err := e.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &e.bucket})
	if err != nil {
		t.Fatal(err)
	}
	recs := lapsed()
	if len(recs) != 1 || recs[0].UploadID != aws.ToString(out.Uploads[0].UploadId) || recs[0].Bucket != e.bucket ||
		recs[0].Name != "/d/big.bin" || recs[0].SystemOwner != "alice" || recs[0].SystemID != "bkt" {
		t.Fatalf("ledger while the upload runs: %+v, want the upload %s", recs, aws.ToString(out.Uploads[0].UploadId))
	}
	pw.Close()
	if st := <-answered; st != http.StatusCreated {
		t.Fatalf("upload: %d", st)
	}
	if err := e.api.Temps().flush(ctx); err != nil {
		t.Fatal(err)
	}
	if recs := lapsed(); len(recs) != 0 {
		t.Fatalf("the completed upload's record stayed: %+v", recs)
	}

	// An upload left behind (as by a killed instance): its lapsed record makes the sweep abort it.
	key := "d/left.bin"
	cu, err := e.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &e.bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.api.deps.Store.RecordTemp(ctx, &store.TempFile{ID: "left", SystemOwner: "alice", SystemID: "bkt", Name: "/d/left.bin",
		Bucket: e.bucket, UploadID: aws.ToString(cu.UploadId), LeaseUntil: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.api.Temps().Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if n := e.uploadsLeft(); n != 0 {
		t.Fatalf("%d multipart uploads left after the sweep", n)
	}
}
