// Copyright 2026 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package ssh

import (
	"bytes"
	"crypto/rand"
	"io"
	"runtime"
	"sync"
	"testing"
)

// patternByte is the byte at offset off of stream (0 or 1) in TestPacketBufsRecycled: it
// differs between neighbouring packets and between the streams.
func patternByte(stream int, off int) byte {
	return byte(off ^ off>>8 ^ off>>16 ^ stream*0x5a)
}

// TestPacketBufsRecycled: a channel's data and extended data, sent as fast as the window allows
// and read slowly in small reads, arrive intact for every kind of cipher although received packets come from
// the free list and go back to it once read (a buffer handed back before its data was read
// would be overwritten by a later packet), and reading them allocates far less than it reads
// (upstream allocated every packet).
func TestPacketBufsRecycled(t *testing.T) {
	const total = 16 << 20 // per stream
	for _, cipher := range []string{CipherAES128GCM, CipherChaCha20Poly1305, "aes128-ctr"} {
		t.Run(cipher, func(t *testing.T) {
			c1, c2, err := netPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			defer c2.Close()
			var wg sync.WaitGroup
			defer wg.Wait()
			wg.Add(1)
			go func() {
				defer wg.Done()
				conf := &ServerConfig{NoClientAuth: true}
				conf.Ciphers = []string{cipher}
				conf.AddHostKey(testSigners["ecdsa"])
				conn, chans, reqs, err := NewServerConn(c1, conf)
				if err != nil {
					t.Errorf("server: %v", err)
					return
				}
				defer conn.Close()
				go DiscardRequests(reqs)
				newCh := <-chans
				ch, creqs, err := newCh.Accept()
				if err != nil {
					t.Errorf("accept: %v", err)
					return
				}
				go DiscardRequests(creqs)
				var streams sync.WaitGroup
				for s, w := range []io.Writer{ch, ch.Stderr()} {
					streams.Go(func() {
						buf := make([]byte, 100<<10) // not a multiple of the packet size
						off := 0
						for off < total {
							n := min(len(buf), total-off)
							for i := range n {
								buf[i] = patternByte(s, off+i)
							}
							if _, err := w.Write(buf[:n]); err != nil {
								t.Errorf("server write: %v", err)
								return
							}
							off += n
						}
					})
				}
				streams.Wait()
				ch.CloseWrite()
				_ = conn.Wait() // until the client, done reading, closes the connection
			}()

			conf := &ClientConfig{User: "u", HostKeyCallback: InsecureIgnoreHostKey()}
			conf.Ciphers = []string{cipher}
			conn, chans, reqs, err := NewClientConn(c2, "", conf)
			if err != nil {
				t.Fatal(err)
			}
			client := NewClient(conn, chans, reqs)
			defer client.Close()
			ch, creqs, err := client.OpenChannel("session", nil)
			if err != nil {
				t.Fatal(err)
			}
			go DiscardRequests(creqs)

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var readers sync.WaitGroup
			for s, r := range []io.Reader{ch, ch.Stderr()} {
				readers.Go(func() {
					buf := make([]byte, 5000) // reads end inside packets
					off := 0
					for {
						n, err := r.Read(buf)
						for i := range n {
							if buf[i] != patternByte(s, off+i) {
								t.Errorf("stream %d: byte %d is %#x, want %#x", s, off+i, buf[i], patternByte(s, off+i))
								return
							}
						}
						off += n
						if err == io.EOF {
							break
						}
						if err != nil {
							t.Errorf("stream %d: %v", s, err)
							return
						}
					}
					if off != total {
						t.Errorf("stream %d: read %d bytes, want %d", s, off, total)
					}
				})
			}
			readers.Wait()
			runtime.ReadMemStats(&after)
			client.Close()
			// Both ends are in this process: the bound covers the server's sending too.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*total/4 {
				t.Errorf("reading %d bytes allocated %d bytes, more than a quarter", 2*total, alloc)
			} else {
				t.Logf("reading %d bytes allocated %d bytes", 2*total, alloc)
			}
		})
	}
}

// writeCounter counts the Write calls it gets and keeps what they wrote.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestGCMPacketOneWrite: aes-gcm hands each packet (length, sealed packet and tag) to the
// transport in one Write, which its bufio.Writer passes to the socket as one write(2), and the
// packet opens again (upstream: two Writes, the length on its own).
func TestGCMPacketOneWrite(t *testing.T) {
	key, iv := make([]byte, 16), make([]byte, 12)
	for _, n := range []int{1, 100, 4096, 32 << 10, 32<<10 + 9} {
		seal, err := newGCMCipher(key, append([]byte(nil), iv...), nil, DirectionAlgorithms{})
		if err != nil {
			t.Fatal(err)
		}
		open, _ := newGCMCipher(key, append([]byte(nil), iv...), nil, DirectionAlgorithms{})
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i)
		}
		var w writeCounter
		for range 2 {
			if err := seal.writeCipherPacket(0, &w, rand.Reader, payload); err != nil {
				t.Fatal(err)
			}
		}
		if w.writes != 2 {
			t.Errorf("%d bytes: 2 packets took %d writes", n, w.writes)
		}
		for range 2 {
			got, err := open.readCipherPacket(0, &w.Buffer)
			if err != nil || !bytes.Equal(got, payload) {
				t.Errorf("%d bytes: opened %d bytes, %v", n, len(got), err)
			}
		}
	}
}
