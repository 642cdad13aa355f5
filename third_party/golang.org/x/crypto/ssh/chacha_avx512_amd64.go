// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

//go:build amd64 && gc && !purego

package ssh

import "golang.org/x/sys/cpu"

// haveChaChaAVX512 reports whether chachaXORAVX512 can run here.
var haveChaChaAVX512 = cpu.X86.HasAVX512F

// chachaXORAVX512 is implemented in chacha_avx512_amd64.s.
//
//go:noescape
func chachaXORAVX512(dst, src *byte, chunks int, state *[16]uint32)
