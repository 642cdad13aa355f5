// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

//go:build amd64 && gc && !purego

package poly1305

import "golang.org/x/sys/cpu"

// haveVector reports whether blocksAVX2 can run here.
var haveVector = cpu.X86.HasAVX2

// haveIFMA reports whether blocksIFMA can run here (AVX-512 IFMA, and
// AVX-512 VL, which the Y and X forms of EVEX instructions need).
var haveIFMA = cpu.X86.HasAVX512F && cpu.X86.HasAVX512IFMA && cpu.X86.HasAVX512VL

// ifmaMin is the shortest message sumVector hands to blocksIFMA rather than
// blocksAVX2: it sets up eight powers of r instead of four, and at 512
// bytes it is no faster (Intel Xeon, Emerald Rapids).
const ifmaMin = 1024

// blocksAVX2 is implemented in sum_vector_amd64.s. It runs the Poly1305
// polynomial, from h = 0, over n bytes of msg (n a positive multiple of 64;
// every block a full one, with the 2¹²⁸ bit), four blocks per step in four
// accumulators of 26-bit limbs, and writes to d the five limb sums of the
// four accumulators after the last step, uncarried (each below 2⁶¹).
//
//go:noescape
func blocksAVX2(d *limbs26, t *vectorPowers, msg *byte, n int)

// blocksIFMA is implemented in sum_ifma_amd64.s. It is blocksAVX2 with
// AVX-512 IFMA: eight blocks per step (n a positive multiple of 128) in
// eight accumulators of 44-bit limbs, and d the three limb sums (each below
// 2⁶¹).
//
//go:noescape
func blocksIFMA(d *limbs44, t *ifmaPowers, msg *byte, n int)

// sumVector is SumVector where haveVector and len(m) >= vectorMin: with
// blocksIFMA where haveIFMA and len(m) >= ifmaMin, else with blocksAVX2.
func sumVector(out *[16]byte, m []byte, key *[32]byte) {
	if haveIFMA && len(m) >= ifmaMin {
		sumIFMA(out, m, key)
		return
	}
	sumAVX2(out, m, key)
}

// sumAVX2 computes the tag of m (at least 64 bytes) with blocksAVX2 for its
// whole 64-byte chunks and the scalar code for the rest.
func sumAVX2(out *[16]byte, m []byte, key *[32]byte) {
	var h mac
	initialize(key, &h.macState)
	var t vectorPowers
	t.init(h.r)
	n := len(m) &^ 63
	var d limbs26
	blocksAVX2(&d, &t, &m[0], n)
	fromLimbs26(&h.h, &d)
	h.Write(m[n:])
	h.Sum(out)
}

// sumIFMA computes the tag of m (at least 128 bytes) with blocksIFMA for its
// whole 128-byte chunks and the scalar code for the rest.
func sumIFMA(out *[16]byte, m []byte, key *[32]byte) {
	var h mac
	initialize(key, &h.macState)
	var t ifmaPowers
	t.init(h.r)
	n := len(m) &^ 127
	var d limbs44
	blocksIFMA(&d, &t, &m[0], n)
	fromLimbs44(&h.h, &d)
	h.Write(m[n:])
	h.Sum(out)
}
