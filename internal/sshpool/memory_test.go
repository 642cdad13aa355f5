package sshpool

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// BenchmarkIdleConnMemory measures what an idle pooled connection costs sshapi: RSS and Go heap
// plus stacks per connection, for n connections (SSHAPI_IDLE_CONNS, default 200) each of its own
// key, spread over sshd servers of 250 connections each, first bare (after a credential check),
// then also holding the connection's shared SFTP channel, then also one idle dedicated SFTP
// channel (kept after a download). It measures; it asserts nothing about size.
//
//	SSHAPI_IDLE_CONNS=1000 go test -run '^$' -bench IdleConnMemory -benchtime 1x ./internal/sshpool/
func BenchmarkIdleConnMemory(b *testing.B) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("SSHAPI_IDLE_CONNS")); err == nil && v > 0 {
		n = v
	}
	const perServer = 250
	var srvs []*sshtest.Server
	for range (n + perServer - 1) / perServer {
		srvs = append(srvs, sshtest.New(b, sshtest.Options{ExtraConfig: "MaxStartups 100:30:200"}))
	}
	for b.Loop() {
		p := New(Config{MaxConnsPerHost: n + 10, MaxConnsPerOwnerHost: n + 10, MaxDialsPerHost: 8, IdleTimeout: time.Hour, KeepaliveInterval: time.Hour}, nil, nil)
		if err := p.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		targets := make([]Target, n)
		for i := range targets {
			srv := srvs[i%len(srvs)]
			targets[i] = target(b, srv, fmt.Sprintf("s%d", i), srv.Signer)
			targets[i].Key.Owner = fmt.Sprintf("o%d", i)
		}
		rss0, heap0 := memNow()
		forAll(b, targets, func(tg Target) error { return p.Check(b.Context(), tg) })
		if got := p.Stats().Conns; got != n {
			b.Fatalf("%d pooled connections, want %d", got, n)
		}
		rss1, heap1 := memNow()
		forAll(b, targets, func(tg Target) error {
			s, err := p.SFTP(b.Context(), tg)
			if err != nil {
				return err
			}
			_, err = s.Getwd()
			s.Done(err)
			return err
		})
		rss2, heap2 := memNow()
		forAll(b, targets, func(tg Target) error {
			l, err := p.DedicatedSFTP(b.Context(), tg)
			if err != nil {
				return err
			}
			_, err = l.Getwd()
			_ = l.Close() // kept idle on its connection
			return err
		})
		if got := p.Stats().IdleSFTP; got != n {
			b.Fatalf("%d idle SFTP channels, want %d", got, n)
		}
		rss3, heap3 := memNow()
		b.ReportMetric(float64(rss1-rss0)/1024/float64(n), "rss-KiB/conn")
		b.ReportMetric(float64(heap1-heap0)/1024/float64(n), "heap+stack-KiB/conn")
		b.ReportMetric(float64(rss2-rss0)/1024/float64(n), "rss-KiB/conn+sftp")
		b.ReportMetric(float64(heap2-heap0)/1024/float64(n), "heap+stack-KiB/conn+sftp")
		b.ReportMetric(float64(rss3-rss0)/1024/float64(n), "rss-KiB/conn+sftp+idle")
		b.ReportMetric(float64(heap3-heap0)/1024/float64(n), "heap+stack-KiB/conn+sftp+idle")
		_ = p.Stop(b.Context())
	}
}

// forAll runs fn for every target, 16 at a time, and fails b on the first error.
func forAll(b *testing.B, targets []Target, fn func(Target) error) {
	b.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(targets))
	for _, tg := range targets {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := fn(tg); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// memNow returns the process's resident set and Go heap-in-use plus stacks, after a GC.
func memNow() (rss, heap int64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb * 1024
		}
	}
	return rss, int64(ms.HeapInuse + ms.StackInuse)
}
