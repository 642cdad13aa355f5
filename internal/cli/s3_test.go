package cli

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/s3test"
)

// TestClientVerbsOnS3 runs the file verbs unchanged against an S3 system on a real versitygw.
func TestClientVerbsOnS3(t *testing.T) {
	e := startVerbEnv(t)
	gw := s3test.New(t)
	bucket := gw.Bucket(t)
	e.call(t, "POST", "/v1/systems", map[string]any{"id": "obj", "kind": "s3", "endpoint": gw.Endpoint, "bucket": bucket, "path_style": true})
	e.call(t, "PUT", "/v1/systems/obj/credential", map[string]any{"access_key_id": gw.AccessKeyID, "secret_access_key": gw.SecretAccessKey})
	if out := mustRun(t, "systems"); !strings.Contains(out, "obj   "+gw.Endpoint+"/"+bucket) {
		t.Errorf("systems:\n%s", out)
	}
	local := t.TempDir()
	data := make([]byte, 6<<20+7) // two parts
	_, _ = rand.Read(data)
	src := filepath.Join(local, "big.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "mkdir", "-p", "obj:/a/b")
	mustRun(t, "put", "-q", src, "obj:/a/big.bin")
	if out := mustRun(t, "ls", "obj:/a"); out != "b/\nbig.bin\n" {
		t.Errorf("ls:\n%s", out)
	}
	dst := filepath.Join(local, "back.bin")
	mustRun(t, "get", "obj:/a/big.bin", dst)
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Error("get: content differs")
	}
	if out := mustRun(t, "stat", "obj:/a/big.bin"); !strings.Contains(out, "type: file") || !strings.Contains(out, "size: 6291463") {
		t.Errorf("stat:\n%s", out)
	}
	mustRun(t, "rm", "-r", "obj:/a")
	if code, _, errOut := sshapi(t, "stat", "obj:/a/big.bin"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("stat after rm: exit %d %s", code, errOut)
	}
}
