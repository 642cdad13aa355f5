// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

package ssh

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"fmt"
	"io"
	"testing"
)

// BenchmarkPacketCipher measures sealing and opening one packet of a 32 KiB
// payload, the size of an SFTP data packet, for each AEAD cipher, and for
// chacha20-poly1305@openssh.com with each keystream this machine has beside
// the one it picks (chacha20-poly1305@openssh.com/chacha20/32KiB/seal and so
// on), and the AVX-512 keystream with the scalar Poly1305 MAC instead of the
// vector one (avx512+scalarmac), so that a run compares them.
func BenchmarkPacketCipher(b *testing.B) {
	type variant struct{ cipher, impl string }
	variants := []variant{{CipherChaCha20Poly1305, ""}, {CipherChaCha20Poly1305, "chacha20"},
		{CipherChaCha20Poly1305, "aead"}, {CipherChaCha20Poly1305, "avx512"},
		{CipherChaCha20Poly1305, "avx512+scalarmac"},
		{CipherAES128GCM, ""}, {CipherAES256GCM, ""}}
	for _, v := range variants {
		for _, size := range []int{32 << 10, 1 << 10} {
			cipher := v.cipher
			kr := &kexResult{Hash: crypto.SHA256}
			algs := DirectionAlgorithms{Cipher: cipher, MAC: HMACSHA256, compression: compressionNone}
			payload := make([]byte, size)
			rand.Read(payload)
			name := fmt.Sprintf("%s/%dKiB", cipher, size>>10)
			if v.impl != "" {
				name = fmt.Sprintf("%s/%s/%dKiB", cipher, v.impl, size>>10)
			}
			newCipher := func(b *testing.B) (packetCipher, error) {
				c, err := newPacketCipher(clientKeys, algs, kr)
				if err == nil && v.impl != "" {
					useChaChaImpl(b, c, v.impl)
				}
				return c, err
			}
			b.Run(name+"/seal", func(b *testing.B) {
				w, err := newCipher(b)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				for i := 0; b.Loop(); i++ {
					if err := w.writeCipherPacket(uint32(i), io.Discard, rand.Reader, payload); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/seal+open", func(b *testing.B) {
				w, err := newCipher(b)
				if err != nil {
					b.Fatal(err)
				}
				r, err := newCipher(b)
				if err != nil {
					b.Fatal(err)
				}
				var packet bytes.Buffer
				b.SetBytes(int64(size))
				for i := 0; b.Loop(); i++ {
					packet.Reset()
					if err := w.writeCipherPacket(uint32(i), &packet, rand.Reader, payload); err != nil {
						b.Fatal(err)
					}
					if _, err := r.readCipherPacket(uint32(i), &packet); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
