package api

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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

// TestS3CopyUploadInTheLedger: a copy that may not overwrite is a multipart upload of copied
// parts (storage/s3's copyObject), and like a PUT's it is in the temporary-name ledger while it
// runs, so the sweep aborts it if the instance is killed mid-copy; it is forgotten once the copy
// completes. A proxy in front of the S3 server holds the part copy to look in between.
func TestS3CopyUploadInTheLedger(t *testing.T) {
	e := newS3Env(t)
	ctx := context.Background()
	release, held := make(chan struct{}), make(chan struct{}, 1)
	upstream, err := url.Parse(e.gw.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Query().Has("partNumber") && r.Header.Get("X-Amz-Copy-Source") != "" {
			held <- struct{}{}
			<-release
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": "held", "kind": "s3", "endpoint": proxy.URL, "bucket": e.bucket, "path_style": true})
	if r.status != 201 {
		t.Fatalf("create s3 system: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "PUT", "/v1/systems/held/credential", map[string]any{"access_key_id": e.gw.AccessKeyID, "secret_access_key": e.gw.SecretAccessKey}); r.status != 200 {
		t.Fatalf("put s3 credential: %d %s", r.status, r.body)
	}
	e.putObject("d/src.bin", "the source")
	answered := make(chan resp, 1)
	go func() {
		answered <- e.do("alice", "POST", "/v1/systems/held/ops/copy", map[string]any{"source": "/d/src.bin", "destination": "/d/dst.bin"})
	}()
	<-held
	// The server may list an upload a moment after answering its creation (as for the PUT above).
	awaitState(t, "the copy's multipart upload to be listed", func() bool { return e.uploadsLeft() == 1 })
	out, err := e.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &e.bucket})
	if err != nil || len(out.Uploads) != 1 {
		close(release)
		t.Fatalf("multipart uploads while the part copy is held: %d %v", len(out.Uploads), err)
	}
	recs, err := e.api.deps.Store.ClaimTemps(ctx, time.Now().Add(time.Hour), time.Now(), 10)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].UploadID != aws.ToString(out.Uploads[0].UploadId) || recs[0].Name != "/d/dst.bin" || recs[0].SystemID != "held" {
		t.Fatalf("ledger while the copy runs: %+v, want the upload %s", recs, aws.ToString(out.Uploads[0].UploadId))
	}
	if r := <-answered; r.status != 200 {
		t.Fatalf("copy: %d %s", r.status, r.body)
	}
	if err := e.api.Temps().flush(ctx); err != nil {
		t.Fatal(err)
	}
	if recs, err := e.api.deps.Store.ClaimTemps(ctx, time.Now().Add(time.Hour), time.Now(), 10); err != nil || len(recs) != 0 {
		t.Fatalf("the completed copy's record stayed: %+v %v", recs, err)
	}
}
