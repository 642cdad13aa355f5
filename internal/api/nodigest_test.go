package api

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUploadDigest: digest=none writes the same bytes and answers without a sha256 (on one
// channel, striped over four, and through a multipart POST); the default and digest=sha256
// answer with the body's SHA-256; a digest that is neither, or none beside an expected sha256,
// is a 400 naming the digest field that writes nothing.
func TestUploadDigest(t *testing.T) {
	payload := make([]byte, 3<<20+999) // above stripeConfig's threshold
	_, _ = rand.Read(payload)
	sum := sha256.Sum256(payload)
	want := hex.EncodeToString(sum[:])
	for _, striped := range []bool{false, true} {
		name := "one channel"
		e := newEnv(t)
		if striped {
			name = "striped"
			e = newEnvConfig(t, stripeConfig(), nil)
		}
		e.register("alice", "hpc")
		dir := e.srv.MkTemp(t)
		url := "/v1/systems/hpc/content" + dir
		for _, tc := range []struct {
			query, header string
			status        int
			sha256, field string
		}{
			{"", "", 201, want, ""},
			{"?digest=sha256", "", 201, want, ""},
			{"?digest=none", "", 201, "", ""},
			{"?digest=sha256", want, 201, want, ""},
			{"?digest=none", want, 400, "", "digest"},
			{"?digest=none&sha256=" + want, "", 400, "", "digest"},
			{"?digest=md5", "", 400, "", "digest"},
		} {
			t.Run(name+" "+tc.query+" "+tc.header, func(t *testing.T) {
				file := filepath.Join(dir, "up.bin")
				_ = os.Remove(file)
				var hdr []string
				if tc.header != "" {
					hdr = []string{"X-Checksum-Sha256", tc.header}
				}
				r := e.do("alice", "PUT", url+"/up.bin"+tc.query, string(payload), hdr...)
				if r.status != tc.status {
					t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
				}
				if tc.status != 201 {
					if f := fieldOf(t, r); f != tc.field {
						t.Fatalf("field %q, want %q: %s", f, tc.field, r.body)
					}
					if _, err := os.Stat(file); !os.IsNotExist(err) {
						t.Fatalf("a refused upload wrote %s: %v", file, err)
					}
					return
				}
				var res map[string]any
				if err := json.Unmarshal(r.body, &res); err != nil {
					t.Fatal(err)
				}
				if got, ok := res["sha256"]; tc.sha256 == "" && ok || tc.sha256 != "" && got != tc.sha256 {
					t.Fatalf("answer %s, want sha256 %q", r.body, tc.sha256)
				}
				got, err := os.ReadFile(file)
				if err != nil || !bytes.Equal(got, payload) {
					t.Fatalf("uploaded file: %d bytes, equal %v, %v", len(got), bytes.Equal(got, payload), err)
				}
			})
		}
		if striped && !strings.Contains(e.log.String(), "channels=4") {
			t.Fatalf("the uploads were not striped over 4 channels:\n%s", e.log.String())
		}
		if !striped {
			var mp bytes.Buffer
			mw := multipart.NewWriter(&mp)
			fw, _ := mw.CreateFormFile("file", "form.txt")
			_, _ = fw.Write([]byte("from a browser"))
			_ = mw.Close()
			r := e.do("alice", "POST", url+"?digest=none", mp.String(), "Content-Type", mw.FormDataContentType())
			if b, _ := os.ReadFile(filepath.Join(dir, "form.txt")); r.status != 201 || string(b) != "from a browser" || strings.Contains(string(r.body), "sha256") {
				t.Fatalf("multipart without a digest: %d %s", r.status, r.body)
			}
		}
	}
}

// TestS3UploadDigest: an S3 upload with digest=none stores the same bytes and answers without
// a sha256; by default it answers with the body's.
func TestS3UploadDigest(t *testing.T) {
	e := newS3Env(t)
	body := make([]byte, 6<<20+7) // two parts
	_, _ = rand.Read(body)
	sum := sha256.Sum256(body)
	for _, tc := range []struct{ query, sha256 string }{{"", hex.EncodeToString(sum[:])}, {"?digest=none", ""}} {
		r := e.do("alice", "PUT", "/v1/systems/bkt/content/big.bin?overwrite=true"+strings.Replace(tc.query, "?", "&", 1), string(body))
		var res map[string]any
		if r.status != 201 || json.Unmarshal(r.body, &res) != nil {
			t.Fatalf("upload %q: %d %s", tc.query, r.status, r.body)
		}
		if got, ok := res["sha256"]; tc.sha256 == "" && ok || tc.sha256 != "" && got != tc.sha256 {
			t.Fatalf("upload %q answered %s, want sha256 %q", tc.query, r.body, tc.sha256)
		}
		if r := e.do("alice", "GET", "/v1/systems/bkt/content/big.bin", nil); r.status != 200 || !bytes.Equal(r.body, body) {
			t.Fatalf("download after %q: %d, %d bytes", tc.query, r.status, len(r.body))
		}
	}
}
