package api

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BenchmarkList10x50: listings of a 10-entry directory (GET /v1/systems/{id}/ls/{path}, full
// metadata JSON) with 50 concurrent clients, as the clients bench's ls case asks; with
// -benchmem its B/op and allocs/op (client included) are what a listing costs in memory:
//
//	go test -run '^$' -bench List10x50 -benchtime 5000x -benchmem ./internal/api/
func BenchmarkList10x50(b *testing.B) {
	be := newBenchEnv(b)
	dir := be.srv.MkTemp(b)
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	tok := be.token("alice")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	work := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	for range 50 {
		wg.Go(func() {
			for range work {
				be.get(b, client, tok, "/v1/systems/hpc/ls/"+remote(dir), io.Discard)
			}
		})
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
