package ui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/chromedp/chromedp"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/s3test"
	"github.com/sshapi/sshapi/internal/service"
)

// TestBrowserBucket browses an S3 bucket of 450 keys (more than two listing pages) in Chromium
// against a real versitygw: a bucket's listing has no offset and no total, so the page follows
// its cursors page after page, shows "N+ entries" while more remain, and reaches the last key
// with the exact count; an upload into the bucket arrives whole.
func TestBrowserBucket(t *testing.T) {
	const keys = 450
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(gw.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(gw.AccessKeyID, gw.SecretAccessKey, "")})
	for i := range keys {
		key := fmt.Sprintf("k%04d", i)
		if _, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}

	svc, dataDir := startService(t, "127.0.0.1:0", nil)
	base := "http://" + svc.Addr()
	sec, err := service.DevSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.IssueHS256(sec, "dev", 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	bearer := map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
	sys, _ := json.Marshal(map[string]any{"id": "bkt", "kind": "s3", "endpoint": gw.Endpoint, "bucket": bucket, "path_style": true})
	if code, body := do(t, &http.Client{}, "POST", base+"/v1/systems", string(sys), bearer); code != 201 {
		t.Fatalf("create system: %d %s", code, body)
	}
	cred, _ := json.Marshal(map[string]any{"access_key_id": gw.AccessKeyID, "secret_access_key": gw.SecretAccessKey})
	if code, body := do(t, &http.Client{}, "PUT", base+"/v1/systems/bkt/credential", string(cred), bearer); code/100 != 2 {
		t.Fatalf("put credential: %d %s", code, body)
	}
	link, err := svc.UI().CreateLoginLink(context.Background(), "dev")
	if err != nil {
		t.Fatal(err)
	}

	ctx := newChromium(t)
	step(t, ctx, "follow the login link", chromedp.Navigate(base+link))
	step(t, ctx, "open the bucket", chromedp.Navigate(base+"/ui/#/bkt/"))
	waitJS(t, ctx, "the first page", rowJS("k0000")+` !== undefined`)
	if got := evalJS[string](t, ctx, `document.getElementById("count").textContent`); got != "200+ entries" {
		t.Fatalf("count after the first page: %q, want 200+ entries", got)
	}
	scrollDown := `(() => { const v = document.getElementById("viewport"); v.scrollTop = v.scrollHeight; return true })() && `
	waitJS(t, ctx, "the last key after scrolling", scrollDown+rowJS(fmt.Sprintf("k%04d", keys-1))+` !== undefined`)
	waitJS(t, ctx, "the exact count", `document.getElementById("count").textContent === "450 entries"`)
	if n := evalJS[int](t, ctx, `document.querySelectorAll("#viewport .row").length`); n > 150 {
		t.Fatalf("%d rows in the DOM, want at most 150", n)
	}
	screenshot(t, ctx, "ui-bucket")

	// An upload into the bucket: the resumable endpoint refuses a bucket naming the capability,
	// and the page sends the file in one verified PUT instead.
	payload := make([]byte, 6<<20+7)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "upload.bin")
	if err := os.WriteFile(local, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "choose a file", chromedp.SetUploadFiles(chromedp.ID("upload-input"), []string{local}))
	waitJS(t, ctx, "the upload to finish", `document.getElementById("upload-status").textContent.startsWith("Uploaded 1 of 1")`)
	if !evalJS[bool](t, ctx, `document.getElementById("error").hidden`) {
		t.Fatalf("upload error: %s", evalJS[string](t, ctx, `document.getElementById("error-text").textContent`))
	}
	out, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("upload.bin")})
	if err != nil {
		t.Fatalf("the uploaded object: %v", err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("uploaded bytes differ in the bucket (%d of %d bytes): %v", len(got), len(payload), err)
	}
}
