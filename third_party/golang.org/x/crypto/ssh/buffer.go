// Copyright 2012 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package ssh

import (
	"io"
	"sync"
)

// buffer provides a linked list buffer for data exchange
// between producer and consumer. Theoretically the buffer is
// of unlimited capacity as it does no allocation of its own.
type buffer struct {
	// protects concurrent access to head, tail and closed
	*sync.Cond

	head *element // the buffer that will be read first
	tail *element // the buffer that will be read last

	closed bool
}

// An element represents a single link in a linked list.
type element struct {
	buf  []byte
	next *element
	// whole is the packet buf came from (see writePacket), handed to putPacketBuf once buf
	// has been read.
	whole []byte
}

// newBuffer returns an empty buffer that is not closed.
func newBuffer() *buffer {
	e := new(element)
	b := &buffer{
		Cond: newCond(),
		head: e,
		tail: e,
	}
	return b
}

// write makes buf available for Read to receive.
// buf must not be modified after the call to write.
func (b *buffer) write(buf []byte) {
	b.Cond.L.Lock()
	e := &element{buf: buf}
	b.tail.next = e
	b.tail = e
	b.Cond.Signal()
	b.Cond.L.Unlock()
}

// writePacket is write for data that is part of packet, which the buffer then owns: once
// data has been read, packet goes back to the free list of getPacketBuf. The caller must not
// use packet or data after the call, nor may anything else refer to them.
func (b *buffer) writePacket(data, packet []byte) {
	b.Cond.L.Lock()
	e := &element{buf: data, whole: packet}
	b.tail.next = e
	b.tail = e
	b.Cond.Signal()
	b.Cond.L.Unlock()
}

// eof closes the buffer. Reads from the buffer once all
// the data has been consumed will receive io.EOF.
func (b *buffer) eof() {
	b.Cond.L.Lock()
	b.closed = true
	b.Cond.Signal()
	b.Cond.L.Unlock()
}

// Read reads data from the internal buffer in buf.  Reads will block
// if no data is available, or until the buffer is closed.
func (b *buffer) Read(buf []byte) (n int, err error) {
	b.Cond.L.Lock()
	defer b.Cond.L.Unlock()

	for len(buf) > 0 {
		// if there is data in b.head, copy it
		if len(b.head.buf) > 0 {
			r := copy(buf, b.head.buf)
			buf, b.head.buf = buf[r:], b.head.buf[r:]
			n += r
			continue
		}
		// if there is a next buffer, make it the head
		if len(b.head.buf) == 0 && b.head != b.tail {
			if b.head.whole != nil {
				putPacketBuf(b.head.whole)
				b.head.whole = nil
			}
			b.head = b.head.next
			continue
		}

		// if at least one byte has been copied, return
		if n > 0 {
			break
		}

		// if nothing was read, and there is nothing outstanding
		// check to see if the buffer is closed.
		if b.closed {
			err = io.EOF
			break
		}
		// out of buffers, wait for producer
		b.Cond.Wait()
	}
	return
}

// Received packets of at least packetBufMin bytes are decrypted or copied into buffers from
// this free list, and a channel's data packets go back to it once read (buffer.writePacket),
// so that a download does not allocate, and the runtime zero, a buffer per packet. It holds at
// most packetBufsMax buffers (a channel's window of 2 MiB is 64 packets of 32 KiB).
//
// A buffer goes back as the packet handed up (it starts after the padding length byte of the
// decrypted packet), so each trip shortens it by a byte or so: it is allocated packetBufSlack
// bytes longer than asked for, and dropped once too short.
const (
	packetBufMin   = 8 << 10
	packetBufSlack = 4 << 10
	packetBufsMax  = 64
)

var packetBufs = make(chan []byte, packetBufsMax)

// getPacketBuf returns a buffer of n bytes, from the free list if n is at least packetBufMin
// and a buffer there is long enough. Its contents are undefined.
func getPacketBuf(n int) []byte {
	if n < packetBufMin {
		return make([]byte, n)
	}
	for {
		select {
		case b := <-packetBufs:
			if cap(b) >= n {
				return b[:n]
			}
			// Too short now: dropped, and the next one tried.
		default:
			return make([]byte, n, n+packetBufSlack)
		}
	}
}

// putPacketBuf hands b, which nothing refers to any more, back to the free list.
func putPacketBuf(b []byte) {
	if cap(b) < packetBufMin {
		return
	}
	select {
	case packetBufs <- b[:0]:
	default:
	}
}
