package api

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BenchmarkChecksumSmall50: GET …/checksum of an 8-byte file with 50 clients at once (closed
// loop) against the test sshd, the load of issue 23's regression:
//
//	go test -run '^$' -bench ChecksumSmall50 -benchtime 3000x ./internal/api/
func BenchmarkChecksumSmall50(b *testing.B) {
	e := newEnv(b)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(b)
	if err := os.WriteFile(filepath.Join(dir, "small"), []byte("8 bytes\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	chownTree(b, dir, e.srv.User)
	tok := e.token("alice")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	be := &benchEnv{env: e}
	path := "/v1/systems/hpc/checksum/" + remote(dir) + "/small"
	be.get(b, client, tok, path, io.Discard) // dial
	var wg sync.WaitGroup
	work := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				be.get(b, client, tok, path, io.Discard)
			}
		}()
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
