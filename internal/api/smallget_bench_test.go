package api

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshpool"
)

// BenchmarkSmallGet: one 4 KiB download after another through the API, with the pool keeping
// idle dedicated SFTP channels (the default) and without (each GET opens a channel and starts
// an sftp-server), in the same run:
//
//	go test -run '^$' -bench SmallGet -benchtime 300x ./internal/api/
func BenchmarkSmallGet(b *testing.B) {
	for _, tc := range []struct {
		name    string
		perConn int
	}{{"idle-channels", 0}, {"no-idle-channels", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnvConfig(b, Config{}, func(_ string, d *Deps, _ **Server) {
				p := sshpool.New(sshpool.Config{SFTPIdlePerConn: tc.perConn}, slog.New(slog.DiscardHandler), nil)
				_ = p.Start(b.Context())
				b.Cleanup(func() { _ = p.Stop(b.Context()) })
				d.Pool = p
			})
			e.register("alice", "hpc")
			dir := e.srv.MkTemp(b)
			if err := os.WriteFile(filepath.Join(dir, "small"), make([]byte, 4096), 0o644); err != nil {
				b.Fatal(err)
			}
			chownTree(b, dir, e.srv.User)
			tok := e.token("alice")
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			be := &benchEnv{env: e}
			be.get(b, client, tok, "/v1/systems/hpc/content/"+remote(dir)+"/small", io.Discard) // dial
			start := time.Now()
			for b.Loop() {
				be.get(b, client, tok, "/v1/systems/hpc/content/"+remote(dir)+"/small", io.Discard)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/1000, "ms/get")
		})
	}
}
