package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkGuardCost: what ordering grantees' operations (package guard) costs, as the rate of
// the same file operations by the owner and by a grantee with a write grant, 16 clients at once,
// in the same run against the same sshd:
//
//	go test -run '^$' -bench GuardCost -benchtime 2000x ./internal/api/
//
// The owner's path takes no guard at all; the grantee's takes it shared for every request (and
// pays the grant lookup the owner does not). BenchmarkHold in package guard measures the guard
// alone.
func BenchmarkGuardCost(b *testing.B) {
	e := newEnv(b)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(b)
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	blob := bytes.Repeat([]byte("y"), 1<<20)
	if err := os.WriteFile(filepath.Join(dir, "blob"), blob, 0o644); err != nil {
		b.Fatal(err)
	}
	chownTree(b, dir, e.srv.User)
	if r := e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "user:bob", "path": dir, "access": "write"}); r.status != 201 {
		b.Fatalf("grant: %d %s", r.status, r.body)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	var seq atomic.Int64
	ops := []struct {
		name   string
		method string
		path   func() string
		body   func() io.Reader
		want   int
	}{
		{"stat", "GET", func() string { return "stat/" + remote(dir) + "/f1" }, nil, 200},
		{"ls10", "GET", func() string { return "ls/" + remote(dir) }, nil, 200},
		{"get1MiB", "GET", func() string { return "content/" + remote(dir) + "/blob" }, nil, 200},
		{"put1MiB", "PUT", func() string { return fmt.Sprintf("content/%s/up%d?overwrite=true", remote(dir), seq.Add(1)%64) },
			func() io.Reader { return bytes.NewReader(blob) }, 201},
	}
	for _, op := range ops {
		for _, who := range []struct{ name, user, sys string }{{"owner", "alice", "hpc"}, {"grantee", "bob", "alice:hpc"}} {
			b.Run(op.name+"/"+who.name, func(b *testing.B) {
				tok := e.token(who.user)
				b.SetParallelism(8) // 16 clients on 2 CPUs
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						var body io.Reader
						if op.body != nil {
							body = op.body()
						}
						req, _ := http.NewRequest(op.method, e.url+"/v1/systems/"+who.sys+"/"+op.path(), body)
						req.Header.Set("Authorization", "Bearer "+tok)
						res, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode != op.want && !(op.method == "PUT" && res.StatusCode == 200) {
							b.Errorf("%s %s: %d", op.method, op.name, res.StatusCode)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
			})
		}
	}
}
