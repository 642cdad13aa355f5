package sftp

// Tests of reads sent with dispatchRead, whose SSH_FXP_DATA replies recv reads straight into
// the caller's buffer instead of a freshly allocated packet (sshapi's third_party/pkg-sftp.patch).
// They check that ReadAt and Read return the bytes, counts and errors they returned before, over
// a scripted server that also sends what a real server does not, and (with -integration) over
// OpenSSH's sftp-server. TestReadDirectFailureWaits is meant for -race as well.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// readServer answers a client over synchronized pipes as a server of data's bytes would:
// SSH_FXP_OPEN with a handle, SSH_FXP_CLOSE with OK, SSH_FXP_READ with the bytes of data at its
// offset (at most its length) or an EOF status at or past the end. odd, if set, may answer a
// read otherwise: it returns the packets to send instead (framed by frame), nil for the usual
// answer, and whether to hang up after them. With hold > 1 it answers reads in batches of hold,
// last first.
type readServer struct {
	data []byte
	odd  func(id uint32, off uint64, length uint32) (out [][]byte, hangUp bool)
	hold int
}

// client starts the server and a client of it with opts; the test's end closes both. The
// server queues its answers (at most 4096) for a goroutine of their own to write, so that it
// keeps reading requests when the client stops reading answers, as a server over a real
// connection would.
func (s *readServer) client(t *testing.T, opts ...ClientOption) *Client {
	t.Helper()
	cr, sw := io.Pipe() // the client reads what the server writes
	sr, cw := io.Pipe() // the server reads what the client writes
	out := make(chan []byte, 4096)
	go func() {
		defer close(out)
		s.serve(sr, out)
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sr.Close() // the client's writes fail once the server has hung up
		defer sw.Close()
		var err error
		for b := range out {
			if err == nil {
				_, err = sw.Write(b)
			}
		}
	}()
	c, err := NewClientPipe(cr, closeBoth{cw, cr}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return c
}

// closeBoth is the client's end of the pipes: closing it (as the client does when it stops
// receiving, say after a packet it cannot parse) closes both, so that a server blocked
// writing to it stops too.
type closeBoth struct {
	*io.PipeWriter
	r *io.PipeReader
}

func (c closeBoth) Close() error {
	c.r.Close()
	return c.PipeWriter.Close()
}

// serve answers the requests read from r on out until r ends or it hangs up.
func (s *readServer) serve(r io.Reader, out chan<- []byte) {
	var held [][]byte
	for {
		typ, body, err := readFrame(r)
		if err != nil {
			return
		}
		id := uint32(0)
		if len(body) >= 4 {
			id = binary.BigEndian.Uint32(body)
		}
		var answer [][]byte
		hangUp := false
		switch typ {
		case sshFxpInit:
			answer = [][]byte{frame(sshFxpVersion, uint32(sftpProtocolVersion))}
		case sshFxpOpen:
			answer = [][]byte{frame(sshFxpHandle, id, "h")}
		case sshFxpClose:
			answer = [][]byte{frame(sshFxpStatus, id, uint32(sshFxOk), "", "")}
		case sshFxpRead:
			var p sshFxpReadPacket
			if err := p.UnmarshalBinary(body); err != nil {
				return
			}
			if s.odd != nil {
				answer, hangUp = s.odd(p.ID, p.Offset, p.Len)
			}
			if answer == nil {
				answer = s.answer(p.ID, p.Offset, p.Len)
			}
			if s.hold > 1 {
				held = append(held, bytes.Join(answer, nil))
				if len(held) < s.hold {
					continue
				}
				answer = nil
				for i := len(held) - 1; i >= 0; i-- {
					answer = append(answer, held[i])
				}
				held = nil
			}
		default:
			answer = [][]byte{frame(sshFxpStatus, id, uint32(sshFxOPUnsupported), "", "")}
		}
		for _, b := range answer {
			out <- b
		}
		if hangUp {
			return
		}
	}
}

// answer is the usual answer to a read: its header and the data as they are, without copying
// them (TestReadDirectAllocates counts the client's allocations).
func (s *readServer) answer(id uint32, off uint64, length uint32) [][]byte {
	if off >= uint64(len(s.data)) {
		return [][]byte{frame(sshFxpStatus, id, uint32(sshFxEOF), "", "")}
	}
	d := s.data[off:min(off+uint64(length), uint64(len(s.data)))]
	var h [13]byte
	binary.BigEndian.PutUint32(h[0:], uint32(9+len(d)))
	h[4] = byte(sshFxpData)
	binary.BigEndian.PutUint32(h[5:], id)
	binary.BigEndian.PutUint32(h[9:], uint32(len(d)))
	return [][]byte{h[:], d}
}

// frame is an SFTP packet of type typ whose body is parts in order: a uint32, a string (with
// its length) or raw bytes.
func frame(typ fxp, parts ...any) []byte {
	b := []byte{0, 0, 0, 0, byte(typ)}
	for _, p := range parts {
		switch v := p.(type) {
		case uint32:
			b = binary.BigEndian.AppendUint32(b, v)
		case string:
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		default:
			panic("frame: unknown part")
		}
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// readFrame reads one packet and returns its type and body.
func readFrame(r io.Reader) (fxp, []byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return 0, nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(l[:]))
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	if len(b) == 0 {
		return 0, nil, errShortPacket
	}
	return fxp(b[0]), b[1:], nil
}

// failure stands for an SSH_FXP_STATUS of SSH_FX_FAILURE in isErr.
var failure = errors.New("SSH_FX_FAILURE")

// isErr reports whether err is want, or with want failure, a *StatusError of SSH_FX_FAILURE.
func isErr(err, want error) bool {
	var se *StatusError
	if want == failure {
		return errors.As(err, &se) && se.Code == sshFxFailure
	}
	return errors.Is(err, want)
}

// randomBytes are n bytes from a fixed seed.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	return b
}

// checkRead reads n bytes at off from f with ReadAt into a buffer with slack bytes beyond them,
// and checks the count, the error, the bytes read and that nothing else in the buffer was
// written.
func checkRead(t *testing.T, f *File, data []byte, off int64, n, wantN int, wantErr error) {
	t.Helper()
	const slack, fill = 64, 0xee
	buf := bytes.Repeat([]byte{fill}, n+slack)
	got, err := f.ReadAt(buf[:n], off)
	if got != wantN || !errors.Is(err, wantErr) {
		t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d, %v", n, off, got, err, wantN, wantErr)
	}
	if got > 0 && !bytes.Equal(buf[:got], data[off:off+int64(got)]) {
		t.Fatalf("ReadAt(%d bytes at %d): wrong bytes", n, off)
	}
	for i := got; i < len(buf); i++ {
		if buf[i] != fill {
			t.Fatalf("ReadAt(%d bytes at %d) = %d wrote byte %d", n, off, got, i)
		}
	}
}

// TestReadDirectBytes: ReadAt over one request (readChunkAt), several at once (the concurrent
// path) and one after the other (UseConcurrentReads(false)), and Read, return the file's bytes,
// end at its end with io.EOF and write nothing beyond what they return.
func TestReadDirectBytes(t *testing.T) {
	const packet = 1000
	data := randomBytes(10_000)
	size := int64(len(data))
	cases := []struct {
		name    string
		off     int64
		n       int
		wantN   int
		wantErr error
	}{
		{"all", 0, len(data), len(data), nil},
		{"one packet", 1234, packet, packet, nil},
		{"part of a packet", 77, 10, 10, nil},
		{"several packets, not aligned", 1501, 3*packet + 17, 3*packet + 17, nil},
		{"up to the end", size - 2500, 2500, 2500, nil},
		{"across the end", size - 500, 3 * packet, 500, io.EOF},
		{"across the end, one packet", size - 100, packet, 100, io.EOF},
		{"at the end", size, 3 * packet, 0, io.EOF},
		{"past the end", size + 5000, 3 * packet, 0, io.EOF},
		{"past the end, one packet", size + 5000, 10, 0, io.EOF},
	}
	for _, concurrent := range []bool{true, false} {
		s := &readServer{data: data}
		c := s.client(t, MaxPacketUnchecked(packet), MaxConcurrentRequestsPerFile(4), UseConcurrentReads(concurrent))
		f, err := c.Open("f")
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s, concurrent reads %v", tc.name, concurrent), func(t *testing.T) {
				checkRead(t, f, data, tc.off, tc.n, tc.wantN, tc.wantErr)
			})
		}
		all, err := io.ReadAll(struct{ io.Reader }{f}) // Read, not WriteTo
		if err != nil || !bytes.Equal(all, data) {
			t.Errorf("concurrent reads %v: Read to the end: %d bytes, %v; want the %d bytes of the file", concurrent, len(all), err, len(data))
		}
	}
}

// TestReadDirectAllocates: a large ReadAt no longer allocates a packet per reply; the unpatched
// client allocated at least the bytes it read.
func TestReadDirectAllocates(t *testing.T) {
	data := randomBytes(4 << 20)
	s := &readServer{data: data}
	c := s.client(t, MaxPacketUnchecked(32<<10), MaxConcurrentRequestsPerFile(8))
	f, err := c.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data))
	read := func() {
		if n, err := f.ReadAt(buf, 0); n != len(data) || err != nil {
			t.Fatalf("ReadAt = %d, %v", n, err)
		}
	}
	read()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const reads = 4
	for range reads {
		read()
	}
	runtime.ReadMemStats(&after)
	if !bytes.Equal(buf, data) {
		t.Fatal("wrong bytes")
	}
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(reads*len(data)/8); got > limit {
		t.Errorf("%d reads of %d bytes allocated %d bytes, want at most %d", reads, len(data), got, limit)
	}
}

// TestReadDirectOddReplies: replies no OpenSSH server sends (more data than asked, a data
// length beyond the packet, bytes after the data, less data than asked, none, a failure) give
// ReadAt's results of before, over one request and over several, and the connection stays
// in step: the next read returns the right bytes.
func TestReadDirectOddReplies(t *testing.T) {
	const packet = 1000
	data := randomBytes(20_000)
	const off = 3000
	type want struct {
		n   int
		err error
	}
	cases := []struct {
		name string
		// reply answers the first read (at off) of n bytes.
		reply func(id uint32, n uint32) []byte
		// one: a read of packet/2 bytes (one request); several: 3 packets at once.
		one, several want
	}{
		{"more data than asked", func(id, n uint32) []byte {
			return frame(sshFxpData, id, string(data[off:off+n+100]))
		}, want{packet / 2, nil}, want{3 * packet, nil}},
		{"data length beyond the packet", func(id, n uint32) []byte {
			return frame(sshFxpData, id, n+1, data[off:off+n])
		}, want{0, errShortPacket}, want{0, errShortPacket}},
		{"packet too short for a data length", func(id, n uint32) []byte {
			return frame(sshFxpData, id, []byte{0, 0})
		}, want{0, errShortPacket}, want{0, errShortPacket}},
		{"bytes after the data", func(id, n uint32) []byte {
			return frame(sshFxpData, id, string(data[off:off+n]), []byte("trailing"))
		}, want{packet / 2, nil}, want{3 * packet, nil}},
		// One request asks again for the rest; of several, a short one is taken for the end.
		{"less data than asked", func(id, n uint32) []byte {
			return frame(sshFxpData, id, string(data[off:off+n/2]))
		}, want{packet / 2, nil}, want{packet / 2, io.EOF}},
		{"no data", func(id, n uint32) []byte {
			return frame(sshFxpData, id, "")
		}, want{packet / 2, nil}, want{0, io.EOF}},
		{"failure", func(id, n uint32) []byte {
			return frame(sshFxpStatus, id, uint32(sshFxFailure), "boom", "")
		}, want{0, failure}, want{0, failure}},
	}
	for _, tc := range cases {
		for _, several := range []bool{false, true} {
			n, w := packet/2, tc.one
			if several {
				n, w = 3*packet, tc.several
			}
			name := tc.name + map[bool]string{false: ", one request", true: ", several"}[several]
			t.Run(name, func(t *testing.T) {
				first := true
				s := &readServer{data: data, odd: func(id uint32, o uint64, length uint32) ([][]byte, bool) {
					if o != off || !first {
						return nil, false
					}
					first = false
					return [][]byte{tc.reply(id, length)}, false
				}}
				c := s.client(t, MaxPacketUnchecked(packet), MaxConcurrentRequestsPerFile(4))
				f, err := c.Open("f")
				if err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, n)
				got, err := f.ReadAt(buf, off)
				if got != w.n || !isErr(err, w.err) {
					t.Fatalf("ReadAt = %d, %v; want %d, %v", got, err, w.n, w.err)
				}
				if !bytes.Equal(buf[:got], data[off:off+got]) {
					t.Fatal("wrong bytes")
				}
				checkRead(t, f, data, 9000, 2*packet+5, 2*packet+5, nil)
			})
		}
	}
}

// TestReadDirectOutOfOrder: replies that come last first still land where their reads asked.
func TestReadDirectOutOfOrder(t *testing.T) {
	const packet = 1000
	data := randomBytes(8 * packet)
	s := &readServer{data: data, hold: 8}
	c := s.client(t, MaxPacketUnchecked(packet), MaxConcurrentRequestsPerFile(8))
	f, err := c.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	checkRead(t, f, data, 0, len(data), len(data), nil)
}

// TestReadDirectConcurrent: ReadAt from several goroutines at once, on one handle and on two,
// each gets its own bytes.
func TestReadDirectConcurrent(t *testing.T) {
	const packet = 1000
	data := randomBytes(50_000)
	s := &readServer{data: data}
	c := s.client(t, MaxPacketUnchecked(packet), MaxConcurrentRequestsPerFile(4))
	var files []*File
	for range 2 {
		f, err := c.Open("f")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rnd := rand.New(rand.NewSource(int64(g)))
			f := files[g%2]
			for range 50 {
				off := rnd.Int63n(int64(len(data)))
				n := 1 + rnd.Intn(5*packet)
				buf := make([]byte, n)
				got, err := f.ReadAt(buf, off)
				want := min(n, len(data)-int(off))
				if got != want || (err != nil && !(errors.Is(err, io.EOF) && want < n)) {
					t.Errorf("ReadAt(%d at %d) = %d, %v; want %d", n, off, got, err, want)
					return
				}
				if !bytes.Equal(buf[:got], data[off:off+int64(got)]) {
					t.Errorf("ReadAt(%d at %d): wrong bytes", n, off)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestReadDirectConnectionLost: a connection that ends inside a reply's data fails the read
// waiting for it, as it failed every read in flight before, and the reads after it.
func TestReadDirectConnectionLost(t *testing.T) {
	const packet = 1000
	data := randomBytes(20_000)
	for _, n := range []int{packet / 2, 4 * packet} {
		s := &readServer{data: data, odd: func(id uint32, off uint64, length uint32) ([][]byte, bool) {
			whole := frame(sshFxpData, id, string(data[off:off+uint64(length)]))
			return [][]byte{whole[:len(whole)/2]}, true
		}}
		c := s.client(t, MaxPacketUnchecked(packet), MaxConcurrentRequestsPerFile(4))
		f, err := c.Open("f")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, n)
		if got, err := f.ReadAt(buf, 0); !errors.Is(err, ErrSSHFxConnectionLost) {
			t.Errorf("ReadAt of %d bytes, connection lost inside a reply = %d, %v; want %v", n, got, err, ErrSSHFxConnectionLost)
		}
		if _, err := f.ReadAt(buf, 0); err == nil {
			t.Errorf("ReadAt of %d bytes after the connection was lost: no error", n)
		}
	}
}

// TestReadDirectFailureWaits: a ReadAt whose first request fails returns only once every read
// it sent is answered: a later reply is read into the caller's buffer, which must be the
// caller's again once ReadAt has returned. Run it with -race: a reply read into the buffer
// after ReadAt returned is a data race with the caller's writes below; without -race the
// buffer is checked after a later round trip.
func TestReadDirectFailureWaits(t *testing.T) {
	const packet = 1000
	data := randomBytes(20_000)
	s := &readServer{data: data, odd: func(id uint32, off uint64, length uint32) ([][]byte, bool) {
		if off != 0 {
			return nil, false
		}
		return [][]byte{frame(sshFxpStatus, id, uint32(sshFxFailure), "first read fails", "")}, false
	}}
	// One worker: the second read is sent while the first is answered, and may be waiting to
	// be handed to a worker when the first fails.
	c := s.client(t, MaxPacketUnchecked(packet), MaxConcurrentRequestsPerFile(1))
	f, err := c.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		buf := make([]byte, 4*packet)
		n, err := f.ReadAt(buf, 0)
		if n != 0 || !isErr(err, failure) {
			t.Fatalf("ReadAt = %d, %v; want the first read's failure", n, err)
		}
		c.Lock()
		pending := len(c.dsts)
		c.Unlock()
		if pending != 0 {
			t.Fatalf("round %d: ReadAt returned with %d reads into buffers still in flight", i, pending)
		}
		clear(buf) // the caller's again
		checkRead(t, f, data, 10_000, 10, 10, nil)
		if !bytes.Equal(buf, make([]byte, len(buf))) {
			t.Fatalf("round %d: a reply was read into the buffer after ReadAt returned", i)
		}
	}
}

// TestReadDirectOpenSSH: ReadAt and Read of a file over OpenSSH's sftp-server (-integration),
// with the request size and reads in flight sshapi uses, return the file's bytes, the end with
// io.EOF, and allocate no packet per reply.
func TestReadDirectOpenSSH(t *testing.T) {
	const packet = 256<<10 - 1024
	if *testServerImpl {
		t.Skip("reads of this size are for OpenSSH's sftp-server; this package's server answers 32 KiB")
	}
	sftp, cmd := testClient(t, READONLY, NODELAY, MaxPacketUnchecked(packet), MaxConcurrentRequestsPerFile(8))
	defer cmd.Wait()
	defer sftp.Close()

	data := randomBytes(5<<20 + 4321)
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := sftp.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int64(len(data))

	checkRead(t, f, data, 0, len(data), len(data), nil)
	checkRead(t, f, data, 0, len(data)+packet, len(data), io.EOF)
	for off := int64(0); off < size; off += 1 << 20 {
		want, wantErr := int(min(1<<20, size-off)), error(nil)
		if want < 1<<20 {
			wantErr = io.EOF
		}
		checkRead(t, f, data, off, 1<<20, want, wantErr)
	}
	checkRead(t, f, data, 12345, 100, 100, nil)
	checkRead(t, f, data, size, 100, 0, io.EOF)
	all, err := io.ReadAll(struct{ io.Reader }{f})
	if err != nil || !bytes.Equal(all, data) {
		t.Errorf("Read to the end: %d bytes, %v; want the %d bytes of the file", len(all), err, len(data))
	}

	g, err := sftp.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			h := []*File{f, g}[i%2]
			rnd := rand.New(rand.NewSource(int64(i)))
			for range 10 {
				off := rnd.Int63n(size)
				n := 1 + rnd.Intn(3*packet)
				buf := make([]byte, n)
				got, err := h.ReadAt(buf, off)
				want := min(n, int(size-off))
				if got != want || (err != nil && !(errors.Is(err, io.EOF) && want < n)) || !bytes.Equal(buf[:got], data[off:off+int64(got)]) {
					t.Errorf("ReadAt(%d at %d) = %d, %v; want %d bytes of the file", n, off, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()

	buf := make([]byte, len(data))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if n, err := f.ReadAt(buf, 0); n != len(data) || err != nil {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(len(data)/8) {
		t.Errorf("a ReadAt of %d bytes allocated %d bytes, want at most %d", len(data), got, len(data)/8)
	}
}
