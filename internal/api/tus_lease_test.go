package api

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestTusStalledPatchKeepsItsLease: a PATCH whose body stalls for longer than the lease
// (http.tus_lease) still holds the upload while it runs, so a second PATCH from another client
// of the same user is refused with 423 all along, and the file ends up with the bytes of the
// one PATCH that was answered 204. Before the lease was renewed while a PATCH ran, it lapsed
// after TusLease without a committed chunk: the second PATCH took the upload over, wrote its
// bytes and renamed the part file into place (204), and then the stalled PATCH wrote its chunk
// through its still open handle into the finished file.
func TestTusStalledPatchKeepsItsLease(t *testing.T) {
	const lease = time.Second
	e := newEnvConfig(t, Config{TusLease: lease}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	a, b := bytes.Repeat([]byte("A"), 64<<10), bytes.Repeat([]byte("B"), 64<<10)
	loc := tusCreate(t, e, "alice", "hpc", dir+"/s.bin", len(a))

	pr, pw := io.Pipe()
	first := make(chan resp, 1)
	go func() {
		first <- tusDo(t, e, e.url, "alice", "PATCH", loc, pr, "Content-Type", "application/offset+octet-stream",
			"Upload-Offset", "0", "Content-Length", strconv.Itoa(len(a)))
	}()
	if _, err := pw.Write(a[:1000]); err != nil {
		t.Fatal(err)
	}
	// The first PATCH holds the upload once an empty PATCH (which takes and gives back the
	// lease when it is free) is refused.
	awaitState(t, "the first PATCH to hold the upload", func() bool { return tusPatch(t, e, e.url, "alice", loc, 0, nil).status == 423 })
	// For three leases' time, the second client keeps trying to send the whole upload.
	var second resp
	for deadline := time.Now().Add(3 * lease); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if second = tusPatch(t, e, e.url, "alice", loc, 0, b); second.status != 423 {
			break
		}
	}
	if _, err := pw.Write(a[1000:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r := <-first
	got, err := os.ReadFile(filepath.Join(dir, "s.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if second.status != 423 {
		t.Errorf("a second PATCH was let in while the first was writing: %d %s (the first: %d %s)", second.status, second.body, r.status, r.body)
	}
	switch {
	case second.status == 204 && !bytes.Equal(got, b):
		t.Fatalf("the second PATCH was answered 204 but the file holds %q... (the stalled first PATCH wrote into the finished file)", got[:8])
	case r.status == 204 && !bytes.Equal(got, a):
		t.Fatalf("the first PATCH was answered 204 but the file holds %q...", got[:8])
	case r.status != 204 && second.status != 204:
		t.Fatalf("neither PATCH succeeded: %d %s; %d %s", r.status, r.body, second.status, second.body)
	}
}
