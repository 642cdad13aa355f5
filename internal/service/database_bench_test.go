package service

import (
	"path/filepath"
	"testing"

	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/pgtest"
	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// BenchmarkCommandsByDatabase measures command throughput of one instance whose store is SQLite
// against one on PostgreSQL, in the same run, on the same sshd: each command reads the system
// and the credential from the store. Compare the two ns/op (the ratio is the cost of the
// network database per command).
//
//	go test -run '^$' -bench CommandsByDatabase -benchtime 2000x ./internal/service/
func BenchmarkCommandsByDatabase(b *testing.B) {
	srv := sshtest.New(b, sshtest.Options{})
	pg := pgtest.New(b)
	key := ""
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			cfg := config.Default()
			cfg.DataDir, cfg.Addr, cfg.LogLevel = filepath.Join(b.TempDir(), "data"), "127.0.0.1:0", "error"
			if key == "" {
				var err error
				if key, err = secret.NewKeyLine(); err != nil {
					b.Fatal(err)
				}
			}
			cfg.Keys.MasterKeys = key
			if db == "postgres" {
				cfg.Database = pg.NewDatabase(b)
			}
			p := startInproc(b, cfg)
			p.register(srv, "hpc")
			p.runs("hpc") // connections warm
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if code, out, err := p.try("POST", "/v1/systems/hpc/commands", map[string]any{"command": "true"}); err != nil || code != 200 {
						b.Errorf("command: %d %s %v", code, out, err)
						return
					}
				}
			})
		})
	}
}
