// Added by sshapi's third_party/x-crypto.patch. Use of this source code is
// governed by the BSD-style license in the LICENSE file of this module.

package ssh

import (
	"bytes"
	"crypto"
	"strings"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/internal/poly1305"
)

// TestChaCha20Poly1305AEADKeystream checks that packets sealed through each
// faster keystream this machine has (the chacha20poly1305 AEAD's, and
// chachaXORAVX512's), with the vector Poly1305 MAC where the machine has it
// and with the scalar one, are byte for byte the packets package chacha20
// and the scalar MAC produce, and that each implementation opens the
// other's, for payload sizes around the ChaCha20 block, AVX2 batch and 1 KiB
// chunk boundaries and sequence numbers that use all 32 bits.
func TestChaCha20Poly1305AEADKeystream(t *testing.T) {
	for _, impl := range []string{"aead", "avx512", "aead+scalarmac", "avx512+scalarmac", "chacha20+vectormac"} {
		t.Run(impl, func(t *testing.T) { testChaChaKeystream(t, impl) })
	}
}

func testChaChaKeystream(t *testing.T, impl string) {
	newCipher := func(t *testing.T, impl string) *chacha20Poly1305Cipher {
		t.Helper()
		algs := DirectionAlgorithms{Cipher: CipherChaCha20Poly1305, compression: compressionNone}
		pc, err := newPacketCipher(clientKeys, algs, &kexResult{Hash: crypto.SHA256})
		if err != nil {
			t.Fatalf("newPacketCipher: %v", err)
		}
		return useChaChaImpl(t, pc, impl)
	}
	fast, slow := newCipher(t, impl), newCipher(t, "chacha20")
	fastRead, slowRead := newCipher(t, impl), newCipher(t, "chacha20")

	var sizes []int
	for n := 0; n <= 600; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 32768, 32768+13, maxPacket-64)
	for _, seqNum := range []uint32{0, 1, 0x01020304, 0xfffffffe, 0xffffffff} {
		for _, size := range sizes {
			payload := bytes.Repeat([]byte{byte(size), byte(seqNum)}, size/2+1)[:size]
			if size > 0 {
				payload[0] = msgIgnore
			}
			rnd := bytes.Repeat([]byte{0x5a}, 64)

			var fastPacket, slowPacket bytes.Buffer
			if err := fast.writeCipherPacket(seqNum, &fastPacket, bytes.NewReader(rnd), payload); err != nil {
				t.Fatalf("seq %d size %d: %s write: %v", seqNum, size, impl, err)
			}
			if err := slow.writeCipherPacket(seqNum, &slowPacket, bytes.NewReader(rnd), payload); err != nil {
				t.Fatalf("seq %d size %d: chacha20 write: %v", seqNum, size, err)
			}
			if !bytes.Equal(fastPacket.Bytes(), slowPacket.Bytes()) {
				t.Fatalf("seq %d size %d: %s packet differs from package chacha20's", seqNum, size, impl)
			}
			for _, tc := range []struct {
				name   string
				reader *chacha20Poly1305Cipher
				packet []byte
			}{
				{impl + " reads chacha20", fastRead, slowPacket.Bytes()},
				{"chacha20 reads " + impl, slowRead, fastPacket.Bytes()},
			} {
				got, err := tc.reader.readCipherPacket(seqNum, bytes.NewReader(tc.packet))
				if size == 0 {
					// A packet must carry at least one byte; both readers
					// reject it after checking the MAC.
					continue
				}
				if err != nil {
					t.Fatalf("seq %d size %d: %s: %v", seqNum, size, tc.name, err)
				}
				if !bytes.Equal(got, payload) {
					t.Fatalf("seq %d size %d: %s: payload differs", seqNum, size, tc.name)
				}
			}
		}
	}

	// A flipped bit anywhere in the packet fails the MAC in both readers.
	payload := bytes.Repeat([]byte{msgIgnore}, 1000)
	var packet bytes.Buffer
	if err := fast.writeCipherPacket(7, &packet, bytes.NewReader(make([]byte, 64)), payload); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 3, 4, 500, packet.Len() - 17, packet.Len() - 1} {
		for name, r := range map[string]*chacha20Poly1305Cipher{impl: fastRead, "chacha20": slowRead} {
			bad := bytes.Clone(packet.Bytes())
			bad[i] ^= 0x10
			if _, err := r.readCipherPacket(7, bytes.NewReader(bad)); err == nil {
				t.Errorf("%s reader accepted a packet with byte %d flipped", name, i)
			}
		}
	}
}

// useChaChaImpl makes pc, a chacha20-poly1305@openssh.com packet cipher,
// compute its keystream with impl ("chacha20": package chacha20; "aead":
// the chacha20poly1305 AEAD's Seal; "avx512": chachaXORAVX512), or skips tb
// if this machine has no assembly for it. The MAC is the vector Poly1305
// where the machine has it, except for "chacha20" (the reference) and impl
// ending in "+scalarmac"; "chacha20+vectormac" is package chacha20 with the
// vector MAC.
func useChaChaImpl(tb testing.TB, pc packetCipher, impl string) *chacha20Poly1305Cipher {
	tb.Helper()
	c := pc.(*chacha20Poly1305Cipher)
	c.vectorMAC = poly1305.HasVector
	if rest, ok := strings.CutSuffix(impl, "+scalarmac"); ok {
		impl = rest
		c.vectorMAC = false
	} else if rest, ok := strings.CutSuffix(impl, "+vectormac"); ok {
		if !poly1305.HasVector {
			tb.Skip("no vector Poly1305 on this machine")
		}
		impl = rest
	} else if impl == "chacha20" {
		c.vectorMAC = false
	}
	switch impl {
	case "avx512":
		if !haveChaChaAVX512 {
			tb.Skip("no AVX-512 on this machine; chachaXORAVX512 is not used")
		}
		c.avx512, c.content = true, nil
	case "aead":
		aead, err := chacha20poly1305.New(c.contentKey[:])
		if !useAEADKeystream || err != nil {
			tb.Skip("chacha20poly1305 has no assembly on this machine; the AEAD keystream is not used")
		}
		c.avx512, c.content = false, aead
	case "chacha20":
		c.avx512, c.content = false, nil
	default:
		tb.Fatalf("unknown keystream %q", impl)
	}
	return c
}
