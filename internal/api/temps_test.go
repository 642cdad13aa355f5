package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/files"
)

// tempNames lists the temporary names in dir.
func tempNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if files.IsTempName(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// putStreaming starts a PUT of dest whose body is read from the returned pipe writer.
func (e *env) putStreaming(user, dest string) (*io.PipeWriter, <-chan resp) {
	pr, pw := io.Pipe()
	done := make(chan resp, 1)
	go func() {
		req, err := http.NewRequestWithContext(context.Background(), "PUT", e.url+"/v1/systems/hpc/content"+dest, pr)
		if err != nil {
			done <- resp{status: -1, body: []byte(err.Error())}
			return
		}
		req.Header.Set("Authorization", "Bearer "+e.token(user))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- resp{status: -1, body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		done <- resp{status: res.StatusCode, header: res.Header, body: b}
	}()
	return pw, done
}

// TestTempLeftByLostConnectionIsSwept: an upload whose SSH connection dies under it cannot
// remove its temporary file; the record it made before creating the file lets the keeper remove
// it once the lease lapses. An upload that outlasts several leases keeps its file (the keeper
// renews it) and lands whole.
func TestTempLeftByLostConnectionIsSwept(t *testing.T) {
	const lease = 600 * time.Millisecond
	e := newEnvConfig(t, Config{TempLease: lease}, nil)
	e.register("alice", "hpc")
	e.api.Temps().Start(t.Context())
	t.Cleanup(e.api.Temps().Stop)
	dir := e.srv.MkTemp(t)
	chunk := bytes.Repeat([]byte("x"), 256<<10)

	// 1. The connection dies mid-upload: the temporary file stays, then is swept.
	pw, done := e.putStreaming("alice", dir+"/lost")
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	awaitState(t, "the temporary file to appear", func() bool { return len(tempNames(t, dir)) == 1 })
	left := tempNames(t, dir)[0]
	e.killSSHConnections()
	go func() { // the upload notices the dead connection at its next write
		for {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
	}()
	r := <-done
	_ = pw.CloseWithError(io.ErrClosedPipe)
	if r.status < 500 || r.header.Get("Retry-After") == "" {
		t.Fatalf("upload over a killed connection: %d %s, want 502/503 with Retry-After", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(dir, "lost")); !os.IsNotExist(err) {
		t.Fatalf("a failed upload created its destination: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, left)); err != nil {
		t.Fatalf("the temporary file went without the keeper (so this test proves nothing): %v", err)
	}
	awaitState(t, "the keeper to remove the temporary file", func() bool { return len(tempNames(t, dir)) == 0 })
	awaitState(t, "the record to be forgotten", func() bool {
		got, err := e.api.deps.Store.ClaimTemps(t.Context(), time.Now().Add(time.Hour), time.Now(), 10)
		return err == nil && len(got) == 0
	})

	// 2. An upload slower than several leases: renewed, never swept, lands whole.
	pw, done = e.putStreaming("alice", dir+"/slow")
	h := sha256.New()
	for i := range 4 {
		if _, err := pw.Write(chunk); err != nil {
			t.Fatal(err)
		}
		h.Write(chunk)
		if i == 0 {
			awaitState(t, "the temporary file to appear", func() bool { return len(tempNames(t, dir)) == 1 })
		}
		// Let two leases pass with the file still being written; the sweep runs every lease/3.
		deadline := time.Now().Add(lease)
		awaitState(t, "a lease to pass", func() bool { return time.Now().After(deadline) })
		if n := tempNames(t, dir); len(n) != 1 {
			t.Fatalf("the temporary file of a running upload is gone: %v", n)
		}
	}
	_ = pw.Close()
	r = <-done
	if r.status != 201 {
		t.Fatalf("slow upload: %d %s", r.status, r.body)
	}
	b, err := os.ReadFile(filepath.Join(dir, "slow"))
	if err != nil || hex.EncodeToString(h.Sum(nil)) != sha(b) || len(b) != 4*len(chunk) {
		t.Fatalf("slow upload content: %d bytes %v", len(b), err)
	}
	if n := tempNames(t, dir); len(n) != 0 {
		t.Fatalf("left behind: %v", n)
	}
	// Nothing the keeper knows of is left to sweep (the slow upload reported its name gone).
	if !strings.Contains(e.log.String(), "removed a temporary name left behind") {
		t.Fatal("the keeper did not log the removal")
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
