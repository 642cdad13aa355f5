package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// failingReader yields n bytes of data and then fails.
type failingReader struct {
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = 'z'
	}
	r.n -= k
	return k, nil
}

// cancellingReader cancels ctx after n bytes and keeps producing data.
type cancellingReader struct {
	n      int
	cancel context.CancelFunc
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		r.cancel()
	}
	r.n -= len(p)
	return len(p), nil
}

func TestUpload(t *testing.T) {
	e := newEnv(t)
	f := New(e.sftp, noRunner{t}, Options{})
	original := []byte("original content")
	big := make([]byte, 5<<20+123)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	bigSum := sha256.Sum256(big)
	errReader := errors.New("client went away")

	tests := []struct {
		name     string
		path     string // relative to the test directory; "orig" exists with original
		body     func(cancel context.CancelFunc) io.Reader
		opts     UploadOptions
		want     error  // nil: success
		wantData []byte // content of path afterwards (nil: must not exist)
		wantMode os.FileMode
	}{
		{"new file", "new", func(context.CancelFunc) io.Reader { return bytes.NewReader(big) },
			UploadOptions{SHA256: hex.EncodeToString(bigSum[:])}, nil, big, 0o644},
		{"mode and parents", "a/b/c", func(context.CancelFunc) io.Reader { return strings.NewReader("x") },
			UploadOptions{Parents: true, Mode: 0o600}, nil, []byte("x"), 0o600},
		{"overwrite replaces", "orig", func(context.CancelFunc) io.Reader { return strings.NewReader("replaced") },
			UploadOptions{Overwrite: true}, nil, []byte("replaced"), 0o644},
		{"empty file", "empty", func(context.CancelFunc) io.Reader { return strings.NewReader("") },
			UploadOptions{}, nil, []byte{}, 0o644},
		{"no overwrite", "orig", func(context.CancelFunc) io.Reader { return strings.NewReader("nope") },
			UploadOptions{}, fs.ErrExist, original, 0},
		{"reader fails halfway over original", "orig", func(context.CancelFunc) io.Reader {
			return &failingReader{n: 3 << 20, err: errReader}
		}, UploadOptions{Overwrite: true}, errReader, original, 0},
		{"reader fails halfway, new name", "new2", func(context.CancelFunc) io.Reader {
			return &failingReader{n: 3 << 20, err: errReader}
		}, UploadOptions{}, errReader, nil, 0},
		{"cancelled mid-stream", "orig", func(cancel context.CancelFunc) io.Reader {
			return &cancellingReader{n: 2 << 20, cancel: cancel}
		}, UploadOptions{Overwrite: true}, context.Canceled, original, 0},
		{"checksum mismatch", "orig", func(context.CancelFunc) io.Reader { return bytes.NewReader(big) },
			UploadOptions{Overwrite: true, SHA256: strings.Repeat("ab", 32)}, ErrChecksumMismatch, original, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(e.dir, strings.ReplaceAll(tt.name, " ", "-"))
			writeLocal(t, dir, map[string]string{"orig": string(original)})
			p := filepath.Join(dir, tt.path)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res, err := f.Upload(ctx, p, tt.body(cancel), tt.opts)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(tt.wantData)
				if res.Size != int64(len(tt.wantData)) || res.SHA256 != hex.EncodeToString(sum[:]) || res.Path != p {
					t.Errorf("result = %+v", res)
				}
				fi, err := os.Stat(p)
				if err != nil || fi.Mode().Perm() != tt.wantMode {
					t.Errorf("stat = %v, %v; want mode %v", fi, err, tt.wantMode)
				}
			} else if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			got, err := os.ReadFile(p)
			switch {
			case tt.wantData == nil && !errors.Is(err, fs.ErrNotExist):
				t.Errorf("%s exists after a failed upload (%v)", p, err)
			case tt.wantData != nil && !bytes.Equal(got, tt.wantData):
				t.Errorf("content after upload: %d bytes, want %d", len(got), len(tt.wantData))
			}
			_ = filepath.WalkDir(dir, func(q string, d fs.DirEntry, err error) error {
				if err == nil && IsTempName(d.Name()) {
					t.Errorf("temporary file left behind: %s", q)
				}
				return nil
			})
		})
	}
}

func TestTempName(t *testing.T) {
	for _, name := range []string{"a", strings.Repeat("x", 255), strings.Repeat("日", 85), ".hidden"} {
		tmp := tempName(name)
		if len(tmp) > nameMax || !IsTempName(tmp) || !strings.HasPrefix(tmp, ".") {
			t.Errorf("tempName(%d bytes) = %q (%d bytes), IsTempName %v", len(name), tmp, len(tmp), IsTempName(tmp))
		}
		if !strings.HasPrefix(tmp[1:], truncateUTF8(name, 10)) || strings.ToValidUTF8(tmp, "") != tmp {
			t.Errorf("tempName(%q) = %q", name, tmp)
		}
	}
	for _, name := range []string{"a.part", ".a.sshapi-123.part", "x.sshapi-0123456789abcdef.part", "plain"} {
		if IsTempName(name) {
			t.Errorf("IsTempName(%q) = true", name)
		}
	}
}
