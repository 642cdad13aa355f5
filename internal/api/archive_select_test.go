package api

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestArchiveSelection: content/{dir}?archive=tar.gz&name=…&name=… streams the named files and
// folders of the directory as one archive (folders whole, nothing else), and bad selections are
// a 400 naming the parameter.
func TestArchiveSelection(t *testing.T) {
	e := newEnv(t)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	for p, c := range map[string]string{"a.txt": "A", "b.txt": "B", "sub/c.txt": "C", "sub/deep/d.txt": "D", "other/e.txt": "E"} {
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, dir, e.srv.User)
	base := "/v1/systems/hpc/content/" + remote(dir)
	tests := []struct {
		query  string
		status int
		want   []string // archive members (files with content), or the field a 400 names
	}{
		{"?archive=tar.gz&name=a.txt&name=sub", 200, []string{"a.txt=A", "sub/", "sub/c.txt=C", "sub/deep/", "sub/deep/d.txt=D"}},
		{"?archive=tar.gz&name=b.txt", 200, []string{"b.txt=B"}},
		{"?name=a.txt", 400, []string{"archive"}},
		{"?archive=tar.gz&name=../x", 400, []string{"name"}},
		{"?archive=tar.gz&name=a.txt&name=a.txt", 400, []string{"name"}},
		{"/a.txt?archive=tar.gz&name=x", 400, []string{"name"}},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			r := e.do("alice", "GET", base+tc.query, nil)
			if r.status != tc.status {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if tc.status != 200 {
				var p struct{ Errors []struct{ Field string } }
				if err := json.Unmarshal(r.body, &p); err != nil || len(p.Errors) != 1 || p.Errors[0].Field != tc.want[0] {
					t.Fatalf("problem does not name %s: %s", tc.want[0], r.body)
				}
				return
			}
			gz, err := gzip.NewReader(bytes.NewReader(r.body))
			if err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(gz)
			var got []string
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Typeflag == tar.TypeDir {
					got = append(got, h.Name)
					continue
				}
				b, _ := io.ReadAll(tr)
				got = append(got, h.Name+"="+string(b))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("archive holds %q, want %q", got, tc.want)
			}
		})
	}
}
