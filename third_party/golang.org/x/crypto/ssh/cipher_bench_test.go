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
// payload, the size of an SFTP data packet, for each AEAD cipher.
func BenchmarkPacketCipher(b *testing.B) {
	for _, cipher := range []string{CipherChaCha20Poly1305, CipherAES128GCM, CipherAES256GCM} {
		for _, size := range []int{32 << 10, 1 << 10} {
			kr := &kexResult{Hash: crypto.SHA256}
			algs := DirectionAlgorithms{Cipher: cipher, MAC: HMACSHA256, compression: compressionNone}
			payload := make([]byte, size)
			rand.Read(payload)
			name := fmt.Sprintf("%s/%dKiB", cipher, size>>10)
			b.Run(name+"/seal", func(b *testing.B) {
				w, err := newPacketCipher(clientKeys, algs, kr)
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
				w, err := newPacketCipher(clientKeys, algs, kr)
				if err != nil {
					b.Fatal(err)
				}
				r, err := newPacketCipher(clientKeys, algs, kr)
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
