// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

package poly1305

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/big"
	mathrand "math/rand/v2"
	"testing"
)

// p1305 is 2¹³⁰ - 5.
var p1305 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 130), big.NewInt(5))

// leBig returns the little-endian number b.
func leBig(b []byte) *big.Int {
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	return new(big.Int).SetBytes(be)
}

// clampedR returns the clamped r of key as a big.Int.
func clampedR(key *[32]byte) *big.Int {
	var m macState
	initialize(key, &m)
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], m.r[0])
	binary.LittleEndian.PutUint64(b[8:], m.r[1])
	return leBig(b[:])
}

// polyBig returns the Poly1305 accumulator of msg under key before s is
// added (fully reduced), computed with math/big, independently of this
// package's arithmetic.
func polyBig(msg []byte, key *[32]byte) *big.Int {
	r := clampedR(key)
	h := new(big.Int)
	for len(msg) > 0 {
		n := min(len(msg), 16)
		blk := append(append([]byte{}, msg[:n]...), 1)
		h.Add(h, leBig(blk))
		h.Mul(h, r)
		h.Mod(h, p1305)
		msg = msg[n:]
	}
	return h
}

// sumBig is Poly1305 computed with math/big.
func sumBig(out *[16]byte, msg []byte, key *[32]byte) {
	h := polyBig(msg, key)
	h.Add(h, leBig(key[16:]))
	b := h.Bytes() // big endian
	var le [16]byte
	for i := 0; i < len(b) && i < 16; i++ {
		le[i] = b[len(b)-1-i]
	}
	*out = le
}

// sumAVX2Always is sumAVX2 without the length thresholds: the AVX2 code
// takes every whole 64-byte chunk, so short messages exercise it too.
func sumAVX2Always(out *[16]byte, msg []byte, key *[32]byte) {
	if !haveVector || len(msg) < 64 {
		Sum(out, msg, key)
		return
	}
	sumAVX2(out, msg, key)
}

// sumIFMAAlways is sumIFMA for every message of a whole 128-byte chunk or
// more, and Sum where the machine has no IFMA.
func sumIFMAAlways(out *[16]byte, msg []byte, key *[32]byte) {
	if !haveIFMA || len(msg) < 128 {
		Sum(out, msg, key)
		return
	}
	sumIFMA(out, msg, key)
}

func skipNoVector(t *testing.T) {
	if !haveVector {
		t.Skip("no vector Poly1305 on this machine")
	}
}

// testKeys returns random keys and adversarial ones: r at its clamped
// maximum (every allowed bit set), s all ones, r = 1, r and s zero.
func testKeys(rng *mathrand.Rand, random int) [][32]byte {
	var keys [][32]byte
	var k [32]byte
	for i := range k {
		k[i] = 0xff
	}
	keys = append(keys, k) // r maximal, s all ones
	for i := 16; i < 32; i++ {
		k[i] = 0
	}
	keys = append(keys, k) // r maximal, s zero
	k = [32]byte{0: 1}
	keys = append(keys, k) // r = 1
	for i := 16; i < 32; i++ {
		k[i] = 0xff
	}
	keys = append(keys, k)            // r = 1, s all ones
	keys = append(keys, [32]byte{})   // r = s = 0
	keys = append(keys, [32]byte{15}) // r = 15 (bits 0-3 allowed in byte 0)
	for range random {
		for i := range k {
			k[i] = byte(rng.Uint32())
		}
		keys = append(keys, k)
	}
	return keys
}

// fill fills msg by pattern: 0 random, 1 all 0xff, 2 all zero, 3 0xff
// except random bytes here and there.
func fill(rng *mathrand.Rand, msg []byte, pattern int) {
	switch pattern {
	case 0:
		for i := range msg {
			msg[i] = byte(rng.Uint32())
		}
	case 1:
		for i := range msg {
			msg[i] = 0xff
		}
	case 2:
		clear(msg)
	case 3:
		for i := range msg {
			msg[i] = 0xff
			if rng.IntN(64) == 0 {
				msg[i] = byte(rng.Uint32())
			}
		}
	}
}

func checkSame(t *testing.T, what string, msg []byte, key *[32]byte) {
	t.Helper()
	var want, got, gotAVX2, gotIFMA [16]byte
	sumGeneric(&want, msg, key)
	SumVector(&got, msg, key)
	sumAVX2Always(&gotAVX2, msg, key)
	sumIFMAAlways(&gotIFMA, msg, key)
	if got != want || gotAVX2 != want || gotIFMA != want {
		t.Fatalf("%s: len %d key %x: SumVector %x, AVX2 code %x, IFMA code %x, generic %x", what, len(msg), key, got, gotAVX2, gotIFMA, want)
	}
	if !VerifyVector(&want, msg, key) {
		t.Fatalf("%s: len %d key %x: VerifyVector refuses the right tag", what, len(msg), key)
	}
	bad := want
	bad[len(msg)%16] ^= 1 << (len(msg) % 8)
	if VerifyVector(&bad, msg, key) {
		t.Fatalf("%s: len %d key %x: VerifyVector accepts a wrong tag", what, len(msg), key)
	}
}

// TestVectorEveryLength compares the vector code with the generic code for
// every length 0-2100 under random and adversarial keys and messages.
func TestVectorEveryLength(t *testing.T) {
	skipNoVector(t)
	rng := mathrand.New(mathrand.NewPCG(1, 2))
	msg := make([]byte, 2100)
	for _, key := range testKeys(rng, 4) {
		for pattern := range 4 {
			fill(rng, msg, pattern)
			for n := 0; n <= len(msg); n++ {
				checkSame(t, fmt.Sprintf("pattern %d", pattern), msg[:n], &key)
			}
		}
	}
}

// TestVectorRandom runs many random cases (20,000; 500,000 with -stress):
// keys, lengths up to 40,000 (most short enough to cover the chunk edges
// densely), patterns, and offsets into the buffer (unaligned messages);
// -stress draws a new seed.
func TestVectorRandom(t *testing.T) {
	skipNoVector(t)
	seed := uint64(3)
	if *stressFlag {
		seed = mathrand.Uint64() // a new sample each stress run
	}
	t.Logf("seed %d", seed)
	rng := mathrand.New(mathrand.NewPCG(seed, 4))
	buf := make([]byte, 40000+64)
	cases := 20000
	if testing.Short() {
		cases = 2000
	}
	if *stressFlag {
		cases = 500000
	}
	var key [32]byte
	for i := range cases {
		for j := range key {
			key[j] = byte(rng.Uint32())
		}
		if i%7 == 0 {
			for j := range 16 {
				key[j] = 0xff
			}
		}
		n := rng.IntN(4096)
		if i%10 == 0 {
			n = rng.IntN(40001)
		}
		off := rng.IntN(64)
		msg := buf[off : off+n]
		fill(rng, msg, rng.IntN(4))
		checkSame(t, fmt.Sprintf("case %d", i), msg, &key)
	}
}

// TestVectorAgainstBig checks the vector code against math/big, which shares
// no arithmetic with this package, for a few lengths and keys.
func TestVectorAgainstBig(t *testing.T) {
	skipNoVector(t)
	rng := mathrand.New(mathrand.NewPCG(5, 6))
	msg := make([]byte, 4200)
	for _, key := range testKeys(rng, 3) {
		for pattern := range 4 {
			fill(rng, msg, pattern)
			for _, n := range []int{0, 15, 16, 63, 64, 65, 127, 128, 255, 256, 257, 319, 320, 1023, 1024, 1031, 4096, 4200} {
				var want, got, gotAVX2, gotIFMA [16]byte
				sumBig(&want, msg[:n], &key)
				SumVector(&got, msg[:n], &key)
				sumAVX2Always(&gotAVX2, msg[:n], &key)
				sumIFMAAlways(&gotIFMA, msg[:n], &key)
				if got != want || gotAVX2 != want || gotIFMA != want {
					t.Fatalf("len %d key %x pattern %d: SumVector %x, AVX2 %x, IFMA %x, math/big %x", n, key, pattern, got, gotAVX2, gotIFMA, want)
				}
			}
		}
	}
}

// TestVectorNearP has the accumulator land at and around 2¹³⁰ - 5, where the
// final reduction and the carries matter: with r = 1 the accumulator is the
// sum of the blocks (each with its 2¹²⁸ bit), which chunks of blocks just
// below all ones steer to p - δ for δ in -40..40 (modulo p, any value in
// [0, 2p) is reachable this way). It checks the accumulator really is there
// (math/big) and that the vector code agrees with the generic code.
func TestVectorNearP(t *testing.T) {
	skipNoVector(t)
	keys := [][32]byte{{0: 1}}
	k := [32]byte{0: 1}
	for i := 16; i < 32; i++ {
		k[i] = 0xff
	}
	keys = append(keys, k)
	for _, blocks := range []int{4, 8, 16, 20, 64, 68} {
		for delta := -40; delta <= 40; delta++ {
			// blocks·2¹²⁸ + Σx ≡ p - δ. blocks = 4q: 2¹³⁰·q ≡ 5q, so
			// Σx = p - δ - 5q (mod p), taken in [0, blocks·(2¹²⁸-1)].
			q := blocks / 4
			target := new(big.Int).Sub(p1305, big.NewInt(int64(delta+5*q)))
			target.Mod(target, p1305)
			// Make it as large as blocks of at most 2¹²⁸ - 1 can add up to,
			// so that they are near all ones.
			limit := new(big.Int).Lsh(big.NewInt(int64(blocks)), 128)
			limit.Sub(limit, big.NewInt(int64(blocks)))
			for new(big.Int).Add(target, p1305).Cmp(limit) <= 0 {
				target.Add(target, p1305)
			}
			msg := splitSum(t, target, blocks)
			for _, key := range keys {
				h := polyBig(msg, &key)
				want := new(big.Int).Sub(p1305, big.NewInt(int64(delta)))
				want.Mod(want, p1305)
				if h.Cmp(want) != 0 {
					t.Fatalf("blocks %d delta %d: accumulator %x, meant %x", blocks, delta, h, want)
				}
				checkSame(t, fmt.Sprintf("blocks %d delta %d", blocks, delta), msg, &key)
				// The same with a partial block after, for the scalar tail.
				checkSame(t, fmt.Sprintf("blocks %d delta %d + 5", blocks, delta), append(msg, 0xff, 0xff, 0xff, 0xff, 0xff), &key)
			}
		}
	}
}

// splitSum returns blocks 16-byte blocks whose values add up to sum, each
// below 2¹²⁸ (sum must be at most blocks·(2¹²⁸-1)).
func splitSum(t *testing.T, sum *big.Int, blocks int) []byte {
	t.Helper()
	max := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))
	rest := new(big.Int).Set(sum)
	var msg []byte
	for i := range blocks {
		x := new(big.Int).Set(max)
		if i == blocks-1 || rest.Cmp(max) < 0 {
			x.Set(rest)
		}
		// Leave enough for the remaining blocks not to exceed max each.
		rest.Sub(rest, x)
		if rest.Sign() < 0 {
			t.Fatal("splitSum: negative rest")
		}
		var le [16]byte
		b := x.Bytes()
		for j := range b {
			le[j] = b[len(b)-1-j]
		}
		msg = append(msg, le[:]...)
	}
	if rest.Sign() != 0 {
		t.Fatalf("splitSum: %x left over", rest)
	}
	return msg
}

// TestVectorPowers checks the table of powers against math/big, and that its
// limbs are below 2²⁶ (5·limb below 2²⁹), as the vector code's bounds need.
func TestVectorPowers(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(7, 8))
	for _, key := range testKeys(rng, 50) {
		var m macState
		initialize(&key, &m)
		var tab vectorPowers
		tab.init(m.r)
		r := clampedR(&key)
		row := func(tb *[9][4]uint64, lane int) *big.Int {
			v := new(big.Int)
			for i := 4; i >= 0; i-- {
				if tb[i][lane] >= 1<<26 {
					t.Fatalf("key %x: limb %d = %#x", key, i, tb[i][lane])
				}
				if i > 0 && tb[4+i][lane] != 5*tb[i][lane] {
					t.Fatalf("key %x: row %d is not 5·row %d", key, 4+i, i)
				}
				v.Lsh(v, 26)
				v.Add(v, new(big.Int).SetUint64(tb[i][lane]))
			}
			return v.Mod(v, p1305)
		}
		pow := func(e int64) *big.Int { return new(big.Int).Exp(r, big.NewInt(e), p1305) }
		for lane := range 4 {
			if row(&tab.r4, lane).Cmp(pow(4)) != 0 {
				t.Fatalf("key %x: r4 lane %d wrong", key, lane)
			}
		}
		for lane, e := range []int64{4, 2, 3, 1} {
			if row(&tab.last, lane).Cmp(pow(e)) != 0 {
				t.Fatalf("key %x: last lane %d is not r^%d", key, lane, e)
			}
		}
	}
}

// TestIFMAPowers checks the IFMA table of powers against math/big, and that
// its limbs fit their widths (44, 44, 42 bits) and the 20· rows 52 bits.
func TestIFMAPowers(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(11, 12))
	for _, key := range testKeys(rng, 50) {
		var m macState
		initialize(&key, &m)
		var tab ifmaPowers
		tab.init(m.r)
		r := clampedR(&key)
		row := func(tb *[5][8]uint64, lane int) *big.Int {
			if tb[0][lane] > mask44 || tb[1][lane] > mask44 || tb[2][lane] > mask42 {
				t.Fatalf("key %x: lane %d limbs %x %x %x too wide", key, lane, tb[0][lane], tb[1][lane], tb[2][lane])
			}
			if tb[3][lane] != 20*tb[1][lane] || tb[4][lane] != 20*tb[2][lane] {
				t.Fatalf("key %x: lane %d: rows 3, 4 are not 20·rows 1, 2", key, lane)
			}
			v := new(big.Int).SetUint64(tb[2][lane])
			v.Lsh(v, 44).Add(v, new(big.Int).SetUint64(tb[1][lane]))
			v.Lsh(v, 44).Add(v, new(big.Int).SetUint64(tb[0][lane]))
			return v.Mod(v, p1305)
		}
		pow := func(e int64) *big.Int { return new(big.Int).Exp(r, big.NewInt(e), p1305) }
		for lane := range 8 {
			if row(&tab.r8, lane).Cmp(pow(8)) != 0 {
				t.Fatalf("key %x: r8 lane %d wrong", key, lane)
			}
		}
		for lane, e := range []int64{8, 4, 7, 3, 6, 2, 5, 1} {
			if row(&tab.last, lane).Cmp(pow(e)) != 0 {
				t.Fatalf("key %x: last lane %d is not r^%d", key, lane, e)
			}
		}
	}
}

// TestFromLimbs44 checks the IFMA code's final carry at its input bounds
// against math/big.
func TestFromLimbs44(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(13, 14))
	cases := []limbs44{
		{}, {1<<61 - 1, 1<<61 - 1, 1<<61 - 1},
		{mask44, mask44, mask42},     // 2¹³⁰ - 1
		{mask44 - 4, mask44, mask42}, // p
		{mask44 - 5, mask44, mask42}, // p - 1
		{mask44 + 5, mask44, mask42},
		{0, 0, 1 << 42}, {0, 0, 1<<61 - 1}, {1<<61 - 1, 0, 0},
	}
	for range 10000 {
		var d limbs44
		for i := range d {
			switch rng.IntN(3) {
			case 0:
				d[i] = rng.Uint64() >> 3
			case 1:
				d[i] = mask44 - uint64(rng.IntN(8))
			case 2:
				d[i] = 1<<61 - 1 - uint64(rng.IntN(8))
			}
		}
		cases = append(cases, d)
	}
	for _, d := range cases {
		want := new(big.Int).SetUint64(d[2])
		want.Lsh(want, 44).Add(want, new(big.Int).SetUint64(d[1]))
		want.Lsh(want, 44).Add(want, new(big.Int).SetUint64(d[0]))
		want.Mod(want, p1305)
		var h [3]uint64
		fromLimbs44(&h, &d)
		if h[2] >= 4 {
			t.Fatalf("%x: h = %x, not below 2¹³⁰", d, h)
		}
		got := new(big.Int).SetUint64(h[2])
		got.Lsh(got, 64).Add(got, new(big.Int).SetUint64(h[1]))
		got.Lsh(got, 64).Add(got, new(big.Int).SetUint64(h[0]))
		got.Mod(got, p1305)
		if got.Cmp(want) != 0 {
			t.Fatalf("%x: %x, want %x (mod p)", d, got, want)
		}
	}
}

// TestFromLimbs26 checks the final carry at its input bounds (sums up to
// 2⁶¹ - 1 per limb) against math/big.
func TestFromLimbs26(t *testing.T) {
	rng := mathrand.New(mathrand.NewPCG(9, 10))
	cases := []limbs26{
		{}, {1<<61 - 1, 1<<61 - 1, 1<<61 - 1, 1<<61 - 1, 1<<61 - 1},
		{mask26, mask26, mask26, mask26, mask26},     // 2¹³⁰ - 1
		{mask26 - 4, mask26, mask26, mask26, mask26}, // p
		{mask26 - 5, mask26, mask26, mask26, mask26}, // p - 1
		{mask26 + 5, mask26, mask26, mask26, mask26},
		{0, 0, 0, 0, 1 << 26}, {0, 0, 0, 0, 1<<61 - 1}, {1<<61 - 1, 0, 0, 0, 0},
	}
	for range 10000 {
		var d limbs26
		for i := range d {
			switch rng.IntN(3) {
			case 0:
				d[i] = rng.Uint64() >> 3
			case 1:
				d[i] = mask26 - uint64(rng.IntN(8))
			case 2:
				d[i] = 1<<61 - 1 - uint64(rng.IntN(8))
			}
		}
		cases = append(cases, d)
	}
	for _, d := range cases {
		want := new(big.Int)
		for i := 4; i >= 0; i-- {
			want.Lsh(want, 26)
			want.Add(want, new(big.Int).SetUint64(d[i]))
		}
		want.Mod(want, p1305)
		var h [3]uint64
		fromLimbs26(&h, &d)
		if h[2] >= 4 {
			t.Fatalf("%x: h = %x, not below 2¹³⁰", d, h)
		}
		got := new(big.Int).SetUint64(h[2])
		got.Lsh(got, 64).Add(got, new(big.Int).SetUint64(h[1]))
		got.Lsh(got, 64).Add(got, new(big.Int).SetUint64(h[0]))
		got.Mod(got, p1305)
		if got.Cmp(want) != 0 {
			t.Fatalf("%x: %x, want %x (mod p)", d, got, want)
		}
	}
}

// TestVectorNoWrite checks that SumVector leaves the message alone.
func TestVectorNoWrite(t *testing.T) {
	msg := bytes.Repeat([]byte{0xa5, 0x5a, 0xff}, 1000)
	orig := bytes.Clone(msg)
	var key [32]byte
	var tag [16]byte
	SumVector(&tag, msg, &key)
	if !bytes.Equal(msg, orig) {
		t.Fatal("SumVector modified the message")
	}
}

// BenchmarkSumVector compares Sum (scalar) with SumVector (what it picks),
// and the AVX2 and IFMA code each, at the SSH packet sizes: 32 KiB (an SFTP
// data packet), 1 KiB, 512 and 256 bytes.
func BenchmarkSumVector(b *testing.B) {
	impls := []struct {
		name string
		have bool
		sum  func(out *[16]byte, msg []byte, key *[32]byte)
	}{
		{"scalar", true, Sum}, {"vector", haveVector, SumVector},
		{"avx2", haveVector, sumAVX2Always}, {"ifma", haveIFMA, sumIFMAAlways},
	}
	for _, size := range []int{32 << 10, 1 << 10, 512, 256} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%d/%s", size, impl.name), func(b *testing.B) {
				if !impl.have {
					b.Skip("not on this machine")
				}
				var out [16]byte
				var key [32]byte
				in := make([]byte, size)
				b.SetBytes(int64(len(in)))
				for b.Loop() {
					impl.sum(&out, in, &key)
				}
			})
		}
	}
}
