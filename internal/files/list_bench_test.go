package files

import (
	"fmt"
	"testing"
)

// findOutput10k is what findFormat prints for a directory of 10,000 empty files f00000…f09999,
// in a scrambled order as a directory hash would give.
func findOutput10k() []byte {
	var b []byte
	for i := range 10_000 {
		n := (i * 7919) % 10_000
		b = fmt.Appendf(b, "f%05d\x00f644\x000\x001795442875.1234567890\x001000\x001000\x00\x00", n)
	}
	return b
}

// BenchmarkFindListing10k: the sshapi-side CPU of listing a 10,000-entry directory through
// find, without the server: parsing find's output as it arrives in 32 KiB writes, keeping the
// page and building its entries in name order.
func BenchmarkFindListing10k(b *testing.B) {
	out := findOutput10k()
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		top := newTopK(10_000, "")
		p := &findParser{fn: func(d *dirent) error { top.add(d, d.name, ""); return nil }}
		for rest := out; len(rest) > 0; {
			n := min(len(rest), 32<<10)
			_, _ = p.Write(rest[:n])
			rest = rest[n:]
		}
		if p.err != nil || len(p.rest) != 0 {
			b.Fatal(p.err)
		}
		if page := top.page("/home/user/data", 0); len(page) != 10_000 || page[0].Name != "f00000" {
			b.Fatalf("page of %d", len(page))
		}
	}
}
