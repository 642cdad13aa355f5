package transfer

import (
	"fmt"
	"testing"

	"github.com/sshapi/sshapi/internal/pgtest"
)

// BenchmarkItemsSave saves a tar batch's worth of items (1,024, each with its own sum) per
// operation, as a small-files transfer does after each batch, on SQLite and on PostgreSQL:
//
//	go test -run '^$' -bench BenchmarkItemsSave -benchtime 200x ./internal/transfer
func BenchmarkItemsSave(b *testing.B) {
	const n = 1024
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			var p Persistence
			if name == "sqlite" {
				p = sqliteOpener(b)
			} else {
				cluster := pgtest.New(b)
				var err error
				if p, err = OpenPostgres(b.Context(), cluster.NewDatabase(b), 8); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = p.Close() })
			}
			ctx := b.Context()
			mustInsert(b, p, "tr-1", "alice", "")
			items := make([]Item, 64*n)
			for i := range items {
				items[i] = Item{Seq: int64(i), Kind: KindFile, Source: fmt.Sprintf("/home/user/bench-files/src/d%03d/f%06d", i/1000, i),
					Destination: fmt.Sprintf("/home/user/bench-files/dst-sshapi/d%03d/f%06d", i/1000, i), Size: 4096, Status: ItemPending,
					mtime: 1700000000, mode: 0o644}
			}
			for start := 0; start < len(items); start += n {
				if err := p.ItemsAppend(ctx, &ItemsAppendParams{ID: "tr-1", Items: items[start : start+n]}); err != nil {
					b.Fatal(err)
				}
			}
			batch := make([]*Item, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				start := (i % 64) * n
				for j := range batch {
					it := items[start+j]
					it.Status, it.BytesDone, it.Attempts, it.SHA256 = ItemDone, 4096, 1+i/64, fmt.Sprintf("%064x", start+j+i)
					batch[j] = &it
				}
				if err := p.ItemsSave(ctx, &ItemsSaveParams{ID: "tr-1", Items: batch}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/item")
		})
	}
}
