// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

package poly1305

import (
	"crypto/subtle"
	"math/bits"
)

// HasVector reports whether SumVector and VerifyVector have a vector
// implementation on this machine (amd64 with AVX2, and AVX-512 IFMA for
// long messages where the CPU has it); elsewhere they are Sum and Verify.
var HasVector = haveVector

// vectorMin is the shortest message SumVector hands to the vector code; below
// it the per-message set-up (the powers of r) costs more than it saves: on
// an Intel Xeon (Emerald Rapids) the AVX2 code is 1.5 times slower than the
// scalar code at 256 bytes, even at 512 and 1.2 times faster at 1 KiB.
const vectorMin = 512

// SumVector computes the same authenticator as Sum. Where HasVector and the
// message is at least vectorMin bytes long, its whole 64-byte chunks go
// through the AVX2 code, four 16-byte blocks at a time (or, from ifmaMin
// bytes on where the CPU has AVX-512 IFMA, its whole 128-byte chunks through
// the IFMA code, eight blocks at a time), and the remaining bytes through the
// scalar code, as in Sum.
func SumVector(out *[16]byte, m []byte, key *[32]byte) {
	if !haveVector || len(m) < vectorMin {
		Sum(out, m, key)
		return
	}
	sumVector(out, m, key)
}

// VerifyVector is Verify computed with SumVector: it reports whether mac is
// a valid authenticator for m with the given key, comparing in constant time.
func VerifyVector(mac *[16]byte, m []byte, key *[32]byte) bool {
	var tmp [16]byte
	SumVector(&tmp, m, key)
	return subtle.ConstantTimeCompare(tmp[:], mac[:]) == 1
}

// The vector code keeps numbers modulo 2¹³⁰ - 5 in five limbs of 26 bits
// (radix 2²⁶), so that a product of two limbs fits a 64-bit lane of
// VPMULUDQ's 32×32-bit multiply with room for the sums.
const mask26 = 1<<26 - 1

// limbs26 is a number x = l[0] + l[1]·2²⁶ + l[2]·2⁵² + l[3]·2⁷⁸ + l[4]·2¹⁰⁴.
type limbs26 [5]uint64

// mulR returns h·r modulo 2¹³⁰ - 5, partially reduced, for h with h[2] at
// most 7 and the clamped r: the multiplication and reduction of
// updateGeneric, whose bounds it shares (the result has h[2] at most 5).
// The tables of powers of r are built with it.
//
// It takes and returns the limbs one by one rather than as arrays, which
// the compiler copies through memory in wider words than it reads them
// back in, stalling every step (the functions below avoid array values
// for the same reason).
func mulR(h0, h1, h2, r0, r1 uint64) (uint64, uint64, uint64) {
	h0r0 := mul64(h0, r0)
	h1r0 := mul64(h1, r0)
	h2r0 := mul64(h2, r0)
	h0r1 := mul64(h0, r1)
	h1r1 := mul64(h1, r1)
	h2r1 := mul64(h2, r1)
	// h[2]·r fits 64 bits (h[2] ≤ 7, r's top 4 bits clear), so h2r0 and
	// h2r1 have no high half, and the sums below do not overflow.
	m0 := h0r0
	m1 := add128(h1r0, h0r1)
	m2 := add128(h2r0, h1r1)
	m3 := h2r1
	t0 := m0.lo
	t1, c := bits.Add64(m1.lo, m0.hi, 0)
	t2, c := bits.Add64(m2.lo, m1.hi, c)
	t3, _ := bits.Add64(m3.lo, m2.hi, c)
	// Fold the bits from 2¹³⁰ on back in, times 5 (4 + 1).
	h0, h1, h2 = t0, t1, t2&maskLow2Bits
	cc := uint128{t2 & maskNotLow2Bits, t3}
	h0, c = bits.Add64(h0, cc.lo, 0)
	h1, c = bits.Add64(h1, cc.hi, c)
	h2 += c
	cc = shiftRightBy2(cc)
	h0, c = bits.Add64(h0, cc.lo, 0)
	h1, c = bits.Add64(h1, cc.hi, c)
	h2 += c
	return h0, h1, h2
}

// below130 returns h (h[2] at most 7) reduced below 2¹³⁰, congruent modulo
// 2¹³⁰ - 5: folding the bits from 2¹³⁰ on back in times 5 leaves at most
// 2¹³⁰ + 34, and a second fold less than 40.
func below130(h0, h1, h2 uint64) (uint64, uint64, uint64) {
	for range 2 {
		c := h2 >> 2
		h2 &= 3
		var carry uint64
		h0, carry = bits.Add64(h0, 5*c, 0)
		h1, carry = bits.Add64(h1, 0, carry)
		h2 += carry
	}
	return h0, h1, h2
}

// powersOfR returns r¹ … r^n (pow[i] = r^i; pow[0] unused), each below
// 2¹³⁰.
func powersOfR(pow [][3]uint64, r [2]uint64) {
	r0, r1 := r[0], r[1]
	pow[1][0], pow[1][1], pow[1][2] = r0, r1, 0
	h0, h1, h2 := r0, r1, uint64(0)
	for i := 2; i < len(pow); i++ {
		h0, h1, h2 = mulR(h0, h1, h2, r0, r1)
		pow[i][0], pow[i][1], pow[i][2] = below130(h0, h1, h2)
	}
}

// vectorPowers is the table of powers of r the vector code multiplies with,
// as rows of four 64-bit lanes (one YMM register each), of which it uses the
// low 32 bits. Rows 0-4 are the limbs of a power, rows 5-8 five times limbs
// 1-4 (for the products that wrap around 2¹³⁰).
type vectorPowers struct {
	// r4 is r⁴ in every lane, for every 64-byte chunk but the last.
	r4 [9][4]uint64
	// last is, lane by lane, the power the block in that lane of the last
	// chunk is multiplied with: the lanes hold the chunk's blocks in the
	// order 0, 2, 1, 3 (the order VPUNPCKLQDQ/VPUNPCKHQDQ leave them in), and
	// block i needs r^(4-i), so the lanes have r⁴, r², r³ and r¹.
	last [9][4]uint64
}

// setRow fills the rows of the table t in lane lane for the power p, below
// 2¹³⁰ in saturated 64-bit limbs, split into 26-bit limbs.
func setRow(t *[9][4]uint64, lane int, p *[3]uint64) {
	p0, p1, p2 := p[0], p[1], p[2]
	l1 := (p0 >> 26) & mask26
	l2 := (p0>>52 | p1<<12) & mask26
	l3 := (p1 >> 14) & mask26
	l4 := p1>>40 | p2<<24
	t[0][lane] = p0 & mask26
	t[1][lane] = l1
	t[2][lane] = l2
	t[3][lane] = l3
	t[4][lane] = l4
	t[5][lane] = 5 * l1
	t[6][lane] = 5 * l2
	t[7][lane] = 5 * l3
	t[8][lane] = 5 * l4
}

// init computes the table for the clamped r.
func (t *vectorPowers) init(r [2]uint64) {
	var pow [5][3]uint64
	powersOfR(pow[:], r)
	for lane := range 4 {
		setRow(&t.r4, lane, &pow[4])
	}
	setRow(&t.last, 0, &pow[4])
	setRow(&t.last, 1, &pow[2])
	setRow(&t.last, 2, &pow[3])
	setRow(&t.last, 3, &pow[1])
}

// fromLimbs26 carries d (the vector code's sums, each below 2⁶¹) and sets h
// to it in the saturated 64-bit limbs of macState.h, below 2¹³⁰, congruent
// modulo 2¹³⁰ - 5 but not necessarily fully reduced. The carry out of the
// top limb goes back into the bottom one times 5 (2¹³⁰ ≡ 5). Three passes
// leave every limb below 2²⁶: after the first, all limbs but d[0] are below
// 2²⁶ and d[0] is below 2²⁶ + 2³⁸; after the second, d[0] is below
// 2²⁶ + 5; the third carries out of d[0] at most 1, and out of d[4] only if
// it did, when d[0] is left below 10.
func fromLimbs26(h *[3]uint64, d *limbs26) {
	d0, d1, d2, d3, d4 := d[0], d[1], d[2], d[3], d[4]
	for range 3 {
		d1 += d0 >> 26
		d0 &= mask26
		d2 += d1 >> 26
		d1 &= mask26
		d3 += d2 >> 26
		d2 &= mask26
		d4 += d3 >> 26
		d3 &= mask26
		d0 += 5 * (d4 >> 26)
		d4 &= mask26
	}
	h[0] = d0 | d1<<26 | d2<<52
	h[1] = d2>>12 | d3<<14 | d4<<40
	h[2] = d4 >> 24
}

// The AVX-512 IFMA code keeps numbers modulo 2¹³⁰ - 5 in limbs of 44, 44
// and 42 bits (radix 2⁴⁴), for VPMADD52LUQ/VPMADD52HUQ, which add the low or
// high 52 bits of a 52×52-bit product to a 64-bit lane.
const (
	mask44 = 1<<44 - 1
	mask42 = 1<<42 - 1
)

// limbs44 is a number x = l[0] + l[1]·2⁴⁴ + l[2]·2⁸⁸.
type limbs44 [3]uint64

// fromLimbs44 carries d (the IFMA code's sums, each below 2⁶¹) and sets h
// to it in the saturated 64-bit limbs of macState.h, below 2¹³⁰. As in
// fromLimbs26, three passes leave every limb within its width.
func fromLimbs44(h *[3]uint64, d *limbs44) {
	d0, d1, d2 := d[0], d[1], d[2]
	for range 3 {
		d1 += d0 >> 44
		d0 &= mask44
		d2 += d1 >> 44
		d1 &= mask44
		d0 += 5 * (d2 >> 42)
		d2 &= mask42
	}
	h[0] = d0 | d1<<44
	h[1] = d1>>20 | d2<<24
	h[2] = d2 >> 40
}

// ifmaPowers is the table of powers of r the IFMA code multiplies with, as
// rows of eight 64-bit lanes (one ZMM register each): rows 0-2 are the limbs
// of a power, rows 3 and 4 twenty times limbs 1 and 2 (for the products
// that wrap around 2¹³⁰: 2¹³² ≡ 20).
type ifmaPowers struct {
	// r8 is r⁸ in every lane, for every 128-byte chunk but the last.
	r8 [5][8]uint64
	// last is, lane by lane, the power the block in that lane of the last
	// chunk is multiplied with: the lanes hold the chunk's blocks in the
	// order 0, 4, 1, 5, 2, 6, 3, 7 (what VPUNPCKLQDQ/VPUNPCKHQDQ leave), and
	// block i needs r^(8-i).
	last [5][8]uint64
}

// setRow44 fills the rows of the table t in lane lane for the power p,
// below 2¹³⁰ in saturated 64-bit limbs, split into limbs of 44, 44 and 42
// bits.
func setRow44(t *[5][8]uint64, lane int, p *[3]uint64) {
	p0, p1, p2 := p[0], p[1], p[2]
	l1 := (p0>>44 | p1<<20) & mask44
	l2 := p1>>24 | p2<<40
	t[0][lane] = p0 & mask44
	t[1][lane] = l1
	t[2][lane] = l2
	t[3][lane] = 20 * l1
	t[4][lane] = 20 * l2
}

// init computes the table for the clamped r.
func (t *ifmaPowers) init(r [2]uint64) {
	var pow [9][3]uint64
	powersOfR(pow[:], r)
	for lane := range 8 {
		setRow44(&t.r8, lane, &pow[8])
	}
	for lane, e := range [8]int{8, 4, 7, 3, 6, 2, 5, 1} {
		setRow44(&t.last, lane, &pow[e])
	}
}
