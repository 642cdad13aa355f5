package api

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/wanem"
)

// TestTusCutAfterLastByteKeepsUpload: a client whose connection goes away once it has sent an
// upload's last bytes, before the answer, loses no acknowledged byte: the upload stays (HEAD
// answers at least the offset an earlier PATCH was answered with) and sending the rest again
// finishes it. The system is 40 ms away, so the finish's round trips run after the server has
// seen the client go. Before, the finish saw the request's context canceled before the rename,
// took that for a failed upload, removed the part file and deleted the upload: HEAD answered
// 404 and every acknowledged byte was gone.
func TestTusCutAfterLastByteKeepsUpload(t *testing.T) {
	e := newEnv(t)
	proxy, err := wanem.New(wanem.Config{Upstream: e.srv.Addr, RTT: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Stop() })
	e.registerAt("alice", "far", e.srv, proxy.Addr().String())
	dir := e.srv.MkTemp(t)
	data := randomBytes(2<<20 + 10)
	loc := tusCreate(t, e, "alice", "far", dir+"/cut.bin", len(data), "sha256", sha256Hex(data))
	if r := tusPatch(t, e, e.url, "alice", loc, 0, data[:1<<20]); r.status != 204 {
		t.Fatalf("first PATCH: %d %s", r.status, r.body)
	}

	// The last PATCH, on a connection the client half-closes once the body is sent.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rest := data[1<<20:]
	fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTus-Resumable: 1.0.0\r\n"+
		"Content-Type: application/offset+octet-stream\r\nUpload-Offset: %d\r\nContent-Length: %d\r\n\r\n", loc, e.token("alice"), 1<<20, len(rest))
	if _, err := conn.Write(rest); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, conn) // whatever the server answers; EOF once its handler ended

	r := tusDo(t, e, e.url, "alice", "HEAD", loc, nil)
	if r.status == http.StatusOK {
		off := 0
		fmt.Sscan(r.header.Get("Upload-Offset"), &off)
		if off < 1<<20 {
			t.Fatalf("HEAD answers offset %d after a PATCH was answered 204 with %d", off, 1<<20)
		}
		if p := tusPatch(t, e, e.url, "alice", loc, off, data[off:]); p.status != 204 {
			t.Fatalf("the rest again: %d %s", p.status, p.body)
		}
	} else if _, err := os.Stat(filepath.Join(dir, "cut.bin")); err != nil {
		t.Fatalf("after the cut the upload answers HEAD %d and the file is not there (%v): the acknowledged bytes are lost", r.status, err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "cut.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("content: %v (%d bytes)", err, len(got))
	}
	if names := onlyFiles(t, dir); len(names) != 1 {
		t.Fatalf("left behind: %v", names)
	}
}
