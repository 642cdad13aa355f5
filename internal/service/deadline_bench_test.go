package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkIODeadlines measures what re-arming the write deadline per write costs a download:
// 64 MiB in 32 KiB writes over loopback, with and without the layer (compare the two in one run).
func BenchmarkIODeadlines(b *testing.B) {
	chunk := make([]byte, 32<<10)
	const total = 64 << 20
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for n := 0; n < total; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"bare", h}, {"deadlines", ioDeadlines(h, time.Minute, time.Minute)}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(bc.h)
			defer srv.Close()
			b.SetBytes(total)
			for b.Loop() {
				res, err := http.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, res.Body); err != nil || n != total {
					b.Fatalf("%d bytes, %v", n, err)
				}
				res.Body.Close()
			}
		})
	}
}
