// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

//go:build !amd64 || !gc || purego

package ssh

// haveChaChaAVX512 is false: chachaXORAVX512 is amd64 assembly.
const haveChaChaAVX512 = false

// chachaXORAVX512 is never called where haveChaChaAVX512 is false.
func chachaXORAVX512(dst, src *byte, chunks int, state *[16]uint32) {
	panic("ssh: chachaXORAVX512 without its assembly")
}
