// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

//go:build !amd64 || !gc || purego

package poly1305

// haveVector is false: the vector code is amd64 assembly.
const haveVector = false

// haveIFMA is false: the IFMA code is amd64 assembly.
const haveIFMA = false

// sumVector is never called where haveVector is false.
func sumVector(out *[16]byte, m []byte, key *[32]byte) {
	panic("poly1305: sumVector without its assembly")
}

// sumAVX2 is never called where haveVector is false.
func sumAVX2(out *[16]byte, m []byte, key *[32]byte) {
	panic("poly1305: sumAVX2 without its assembly")
}

// sumIFMA is never called where haveIFMA is false.
func sumIFMA(out *[16]byte, m []byte, key *[32]byte) {
	panic("poly1305: sumIFMA without its assembly")
}
