package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAuditedRequests: audited actions that touch no remote system (grant creations: one
// store write and one audit entry each) from 20 concurrent clients on SQLite, the cost of waiting
// for the audit commit before answering. Compare with the branch point in the same session:
//
//	go test -run '^$' -bench AuditedRequests -benchtime 4000x -count 3 ./internal/api/
func BenchmarkAuditedRequests(b *testing.B) {
	const clients, systems = 20, 50
	e := newEnv(b)
	for i := range systems {
		if r := e.do("alice", "POST", "/v1/systems", map[string]any{"id": fmt.Sprintf("s%d", i), "host": e.srv.Host, "port": e.srv.Port,
			"host_keys": []string{e.srv.AuthorizedHostKey()}}); r.status != 201 {
			b.Fatalf("create system: %d %s", r.status, r.body)
		}
	}
	tok := e.token("alice")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var next atomic.Int64
	var failed atomic.Int64
	work := make(chan struct{})
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				n := next.Add(1)
				body := fmt.Sprintf(`{"principal":"user:u%d","path":"/scratch","access":"read"}`, n)
				req, _ := http.NewRequest("POST", fmt.Sprintf("%s/v1/systems/s%d/grants", e.url, n%systems), bytes.NewReader([]byte(body)))
				req.Header.Set("Authorization", "Bearer "+tok)
				res, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusCreated {
					failed.Add(1)
				}
			}
		}()
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "requests/s")
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d requests failed", n)
	}
}
