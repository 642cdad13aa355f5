package wanem

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the process's user plus system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkThroughput measures how fast bytes cross the proxy on loopback with no delay and
// no rate cap, against a direct connection as the baseline, and how close a 1 Gbit/s path
// comes to its cap. cpu-ms/GiB is the whole process
// (client, proxy and sink), so the proxy's own cost is the difference to "direct".
func BenchmarkThroughput(b *testing.B) {
	benches := []struct {
		name    string
		proxied bool
		streams int
		rtt     time.Duration
		rate    int64
	}{
		{name: "direct", streams: 1},
		{name: "proxy", proxied: true, streams: 1},
		{name: "proxy-4-streams", proxied: true, streams: 4},
		// Not unthrottled: shows how closely a 1 Gbit/s, 20 ms path reaches its cap.
		{name: "proxy-1gbit-20ms", proxied: true, streams: 1, rtt: 20 * time.Millisecond, rate: 125_000_000},
	}
	for _, bc := range benches {
		b.Run(bc.name, func(b *testing.B) {
			addr := startServer(b, sink)
			if bc.proxied {
				addr = startProxy(b, Config{Upstream: addr, RTT: bc.rtt, Rate: bc.rate}).Addr().String()
			}
			const block = 256 << 10
			b.SetBytes(block)
			perStream := max(1, b.N/bc.streams)
			var wg sync.WaitGroup
			errs := make(chan error, bc.streams)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			for range bc.streams {
				c := dial(b, addr)
				_ = c.SetDeadline(time.Time{})
				wg.Go(func() { errs <- sendAll(c, perStream*block) })
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			total := float64(perStream * bc.streams * block)
			b.ReportMetric(float64((cpuTime(b)-cpu0).Milliseconds())/(total/(1<<30)), "cpu-ms/GiB")
		})
	}
}
