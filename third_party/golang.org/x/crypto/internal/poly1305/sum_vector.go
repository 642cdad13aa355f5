// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

package poly1305

import "crypto/subtle"

// HasVector reports whether SumVector and VerifyVector have a vector
// implementation on this machine (amd64 with AVX2); elsewhere they are Sum
// and Verify.
var HasVector = haveVector

// vectorMin is the shortest message SumVector hands to the vector code; below
// it the per-message set-up (the powers of r) costs more than it saves.
const vectorMin = 256

// SumVector computes the same authenticator as Sum. Where HasVector and the
// message is at least vectorMin bytes long, its whole 64-byte chunks go
// through the vector code, four 16-byte blocks at a time, and the remaining
// bytes through the scalar code, as in Sum.
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

// toLimbs26 splits the clamped r (two 64-bit halves) into limbs26.
func toLimbs26(r [2]uint64) limbs26 {
	return limbs26{
		r[0] & mask26,
		(r[0] >> 26) & mask26,
		(r[0]>>52 | r[1]<<12) & mask26,
		(r[1] >> 14) & mask26,
		r[1] >> 40,
	}
}

// carry26 propagates the carries of d, whose limbs may be any 64-bit values
// below 2⁶¹, so that every limb is below 2²⁶, folding the carry out of the
// top limb back into the bottom one times 5 (2¹³⁰ ≡ 5). The result is
// congruent to d modulo 2¹³⁰ - 5 and below 2¹³⁰, but not necessarily fully
// reduced. Three passes suffice: after the first, all limbs but l[0] are
// below 2²⁶ and l[0] is below 2²⁶ + 2³⁸; after the second, l[0] is below
// 2²⁶ + 5; the third carries out of l[0] at most 1, and out of l[4] only
// if it did, when l[0] is left below 10.
func carry26(d limbs26) limbs26 {
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
	return limbs26{d0, d1, d2, d3, d4}
}

// mulProducts returns the five sums of limb products of a·b with the terms
// at or above 2¹³⁰ folded down times 5, before any carry: the computation
// each lane of the vector code does. With limbs of a and b below 2²⁷ the sums
// stay below 2⁵⁹.
func mulProducts(a, b limbs26) limbs26 {
	a0, a1, a2, a3, a4 := a[0], a[1], a[2], a[3], a[4]
	b0, b1, b2, b3, b4 := b[0], b[1], b[2], b[3], b[4]
	s1, s2, s3, s4 := 5*b1, 5*b2, 5*b3, 5*b4
	return limbs26{
		a0*b0 + a1*s4 + a2*s3 + a3*s2 + a4*s1,
		a0*b1 + a1*b0 + a2*s4 + a3*s3 + a4*s2,
		a0*b2 + a1*b1 + a2*b0 + a3*s4 + a4*s3,
		a0*b3 + a1*b2 + a2*b1 + a3*b0 + a4*s4,
		a0*b4 + a1*b3 + a2*b2 + a3*b1 + a4*b0,
	}
}

// mulPower sets *dst to a·b modulo 2¹³⁰ - 5 for the table of powers, for
// a and b with limbs below 2²⁶ + 2¹³. It carries once around and then from
// limb 0 into limb 1, which leaves limb 1 below 2²⁶ + 2¹³ and the others
// below 2²⁶: lazily reduced, which is all the vector code needs (its bounds
// hold for powers with limbs below 2²⁷), and cheaper than carry26's full
// reduction in the per-message set-up.
func mulPower(dst, a, b *limbs26) {
	d := mulProducts(*a, *b)
	d0, d1, d2, d3, d4 := d[0], d[1], d[2], d[3], d[4]
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
	d1 += d0 >> 26
	d0 &= mask26
	*dst = limbs26{d0, d1, d2, d3, d4}
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

// setRow fills the rows of the table t for the power p in lane lane.
func setRow(t *[9][4]uint64, lane int, p *limbs26) {
	t[0][lane] = p[0]
	t[1][lane] = p[1]
	t[2][lane] = p[2]
	t[3][lane] = p[3]
	t[4][lane] = p[4]
	t[5][lane] = 5 * p[1]
	t[6][lane] = 5 * p[2]
	t[7][lane] = 5 * p[3]
	t[8][lane] = 5 * p[4]
}

// init computes the table for the clamped r.
func (t *vectorPowers) init(r [2]uint64) {
	var r1, r2, r3, r4 limbs26
	r1 = toLimbs26(r)
	mulPower(&r2, &r1, &r1)
	mulPower(&r3, &r2, &r1)
	mulPower(&r4, &r2, &r2)
	for lane := range 4 {
		setRow(&t.r4, lane, &r4)
	}
	setRow(&t.last, 0, &r4)
	setRow(&t.last, 1, &r2)
	setRow(&t.last, 2, &r3)
	setRow(&t.last, 3, &r1)
}

// fromLimbs26 carries d (the vector code's sums, each below 2⁶¹) and returns
// it in the saturated 64-bit limbs of macState.h, below 2¹³⁰.
func fromLimbs26(d limbs26) [3]uint64 {
	d = carry26(d)
	return [3]uint64{
		d[0] | d[1]<<26 | d[2]<<52,
		d[2]>>12 | d[3]<<14 | d[4]<<40,
		d[4] >> 24,
	}
}
