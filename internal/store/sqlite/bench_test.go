package sqlite_test

import (
	"crypto/rand"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// BenchmarkGetSystemCredential is the lookup every access decision makes, from two goroutines:
//
//	go test -run '^$' -bench GetSystemCredential -benchmem ./internal/store/sqlite/
func BenchmarkGetSystemCredential(b *testing.B) {
	db := open(b, filepath.Join(b.TempDir(), "sshapi.db"))
	ctx := b.Context()
	if err := db.CreateSystem(ctx, &store.System{Owner: "alice", ID: "c", Host: "h", Port: 22, HostKeys: []string{"ssh-ed25519 AAAA"}}); err != nil {
		b.Fatal(err)
	}
	if err := db.PutCredential(ctx, &store.Credential{Owner: "alice", SystemID: "c", Username: "u", KeyType: "ed25519"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(1)
	b.ResetTimer()
	defer cpuTime(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := db.GetSystemCredential(ctx, "alice", "c"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAppendAuditBatch appends batches of 16 entries, as the audit writer commits them
// under load, to a log that already holds 100,000 (written 1,000 at a time), with ids from newID. An op is one entry.
//
//	go test -run '^$' -bench AppendAuditBatch -benchmem ./internal/store/sqlite/
func BenchmarkAppendAuditBatch(b *testing.B) {
	ids := map[string]func() string{"random": rand.Text, "timeordered": store.NewAuditID}
	for _, name := range []string{"random", "timeordered"} {
		newID := ids[name]
		b.Run(name, func(b *testing.B) {
			db := open(b, filepath.Join(b.TempDir(), "sshapi.db"))
			ctx := b.Context()
			const batch = 16
			entries := func(n int) []store.AuditEntry {
				es := make([]store.AuditEntry, n)
				for i := range es {
					es[i] = store.AuditEntry{Owner: "alice", Action: "command.run", SystemID: "c", Paths: []string{"/home/alice"},
						Status: 200, RequestID: "r0123456789abcdefghi", ID: newID()}
				}
				return es
			}
			for range 100 {
				if err := db.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: entries(1000)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime(b)
			for i := 0; i < b.N; i += batch {
				if err := db.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: entries(batch)}); err != nil {
					b.Fatal(err)
				}
			}
			cpu()
		})
	}
}

// cpuTime starts measuring the process's CPU time (user and system, every thread); the
// function it returns reports it per op as cpu-ns/op, which depends less on what else the
// machine runs than ns/op does.
func cpuTime(b *testing.B) func() {
	start := rusage(b)
	return func() {
		b.ReportMetric(float64((rusage(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func rusage(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
