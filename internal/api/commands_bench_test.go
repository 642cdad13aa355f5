package api

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkUptimeConcurrency runs `uptime` through the HTTP API with a fixed number of
// concurrent clients (closed loop) against a stock sshd and reports the request rate, p50/p99
// latency and errors:
//
//	go test -run '^$' -bench UptimeConcurrency -benchtime 5000x ./internal/api/
func BenchmarkUptimeConcurrency(b *testing.B) {
	e := newEnv(b)
	e.register("alice", "hpc")
	tok := e.token("alice")
	for _, c := range []int{50, 500} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}}
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			var errs atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range c {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t0 := time.Now()
						req, _ := http.NewRequest("POST", e.url+"/v1/systems/hpc/commands", strings.NewReader(`{"command":"uptime"}`))
						req.Header.Set("Authorization", "Bearer "+tok)
						res, err := client.Do(req)
						if err == nil {
							_, _ = io.Copy(io.Discard, res.Body)
							res.Body.Close()
							if res.StatusCode != 200 {
								err = fmt.Errorf("status %d", res.StatusCode)
							}
						}
						if err != nil {
							errs.Add(1)
						}
						lat[i] = time.Since(t0)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			slices.Sort(lat)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(errs.Load()), "errors")
			b.ReportMetric(float64(e.pool.Stats().Conns), "ssh-conns")
		})
	}
}
