// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

//go:build amd64 && gc && !purego

package poly1305

import "golang.org/x/sys/cpu"

// haveVector reports whether blocksAVX2 can run here.
var haveVector = cpu.X86.HasAVX2

// blocksAVX2 is implemented in sum_vector_amd64.s. It runs the Poly1305
// polynomial, from h = 0, over n bytes of msg (n a positive multiple of 64;
// every block a full one, with the 2¹²⁸ bit), four blocks per step in four
// accumulators of 26-bit limbs, and writes to d the five limb sums of the
// four accumulators after the last step, uncarried (each below 2⁶¹).
//
//go:noescape
func blocksAVX2(d *limbs26, t *vectorPowers, msg *byte, n int)

// sumVector is SumVector where haveVector and len(m) >= vectorMin.
func sumVector(out *[16]byte, m []byte, key *[32]byte) {
	var h mac
	initialize(key, &h.macState)
	var t vectorPowers
	t.init(h.r)
	n := len(m) &^ 63
	var d limbs26
	blocksAVX2(&d, &t, &m[0], n)
	h.h = fromLimbs26(d)
	h.Write(m[n:])
	h.Sum(out)
}
