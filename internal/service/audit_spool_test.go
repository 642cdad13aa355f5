package service

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/postgres"
)

// TestAuditSpoolKeepsTheAnswer: an upload whose body is still arriving when PostgreSQL stops is
// answered with its real status (201, the file is there), not "audit entry not recorded", as
// its entry goes to the instance's audit spool; the instance is then killed with SIGKILL, the
// database and the instance (on the same spool directory) come back, and the upload's entry is
// in the audit exactly once.
func TestAuditSpoolKeepsTheAnswer(t *testing.T) {
	c := pgtest.New(t)
	url := c.NewDatabase(t)
	d := newDeploymentOn(t, url)
	spoolDir := filepath.Join(t.TempDir(), "spool")
	d.env = append(d.env, "SSHAPI_HTTP_AUDIT_SPOOL_DIR="+spoolDir)
	srv := sshtest.New(t, sshtest.Options{})
	a := d.start("a")
	d.addSystem(a, "hpc", srv, srv.Addr)
	dir := srv.MkTemp(t)
	target := filepath.Join(dir, "up.bin")

	const reqID = "spooled-upload-1"
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), "PUT", a.url+"/v1/systems/hpc/content"+target, pr)
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("X-Request-Id", reqID)
	type answer struct {
		code int
		body string
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		answered <- answer{code: res.StatusCode, body: string(b)}
	}()
	chunk := make([]byte, 1<<20)
	_, _ = rand.Read(chunk)
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	// The upload is under way (its temporary file exists) before the database goes away.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(dir, ".up.bin.sshapi-*")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the upload's temporary file never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Halt()
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ans := <-answered
	if ans.err != nil || ans.code != http.StatusCreated {
		t.Fatalf("upload with the database stopped mid-body: %d %v %s; want its real status, 201", ans.code, ans.err, ans.body)
	}
	if fi, err := os.Stat(target); err != nil || fi.Size() != 2<<20 {
		t.Fatalf("the uploaded file: %v %v", fi, err)
	}
	if m, _ := filepath.Glob(filepath.Join(spoolDir, "*.ndjson")); len(m) == 0 {
		t.Fatal("nothing in the audit spool after an answer given with the database down")
	}

	a.kill()
	if err := c.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	d.start("b") // on the same spool directory: drains what a left

	db, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	uploads := func() int {
		got, err := db.QueryAudit(context.Background(), &store.AuditQueryParams{Visible: "alice", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range got {
			if e.RequestID == reqID {
				n++
				if e.Action != "files.upload" || e.Status != http.StatusCreated || e.Bytes != 2<<20 {
					t.Fatalf("the upload's entry: %+v", e)
				}
			}
		}
		return n
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(spoolDir, "*.ndjson"))
		if len(m) == 0 && uploads() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spool files left %v, upload entries %d", m, uploads())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := uploads(); n != 1 {
		t.Fatalf("the upload's audit entry is there %d times, want exactly once", n)
	}
}
