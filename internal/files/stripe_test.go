package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// gatedAt is one handle to a file's bytes (shared by all its handles, under mu): it serves
// ReadAt and WriteAt, optionally waiting for gate first, and counts its calls.
type gatedAt struct {
	mu    *sync.Mutex
	data  *[]byte
	gate  <-chan struct{} // nil: no wait
	calls atomic.Int32
	after func() // called after each call, if set
}

func (g *gatedAt) ReadAt(p []byte, off int64) (int, error) {
	defer g.enter()()
	if off >= int64(len(*g.data)) {
		return 0, io.EOF
	}
	n := copy(p, (*g.data)[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (g *gatedAt) WriteAt(p []byte, off int64) (int, error) {
	defer g.enter()()
	if need := off + int64(len(p)); need > int64(len(*g.data)) {
		*g.data = append(*g.data, make([]byte, need-int64(len(*g.data)))...)
	}
	copy((*g.data)[off:], p)
	return len(p), nil
}

// enter waits for the gate, counts the call and locks the file; the returned func calls after
// and unlocks.
func (g *gatedAt) enter() func() {
	if g.gate != nil {
		<-g.gate
	}
	g.calls.Add(1)
	g.mu.Lock()
	return func() {
		g.mu.Unlock()
		if g.after != nil {
			g.after()
		}
	}
}

func buffers(k, size int) [][]byte {
	out := make([][]byte, k)
	for i := range out {
		out[i] = make([]byte, size)
	}
	return out
}

// TestStripedReaderJoin: a handle that joins while the first one is stuck takes over chunks at
// once; the bytes come out whole and in order, also after a Seek (joined handles stay); a Join
// after Close is refused.
func TestStripedReaderJoin(t *testing.T) {
	data := make([]byte, 1<<20+123)
	_, _ = rand.Read(data)
	var mu sync.Mutex
	gate := make(chan struct{})
	var once sync.Once
	first := &gatedAt{mu: &mu, data: &data, gate: gate}
	second := &gatedAt{mu: &mu, data: &data}
	second.after = func() { once.Do(func() { close(gate) }) } // the first handle waits for the second's first read

	sr := NewStripedReader([]io.ReaderAt{first}, int64(len(data)), buffers(4*StripeChunksPerChannel, 16<<10), StripeChunksPerChannel)
	joined := make(chan bool)
	go func() { joined <- sr.Join(second) }()
	got, err := io.ReadAll(io.LimitReader(sr, int64(len(data)/2)))
	if err != nil {
		t.Fatal(err)
	}
	if !<-joined {
		t.Fatal("Join refused while reading")
	}
	if _, err := sr.Seek(int64(len(got)), io.SeekStart); err != nil {
		t.Fatal(err)
	}
	second.calls.Store(0)
	rest, err := io.ReadAll(sr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(got, rest...), data) {
		t.Fatal("striped read with a joined handle returned different bytes")
	}
	if second.calls.Load() == 0 {
		t.Fatal("the joined handle served no read after the Seek")
	}
	if err := sr.Close(); err != nil {
		t.Fatal(err)
	}
	if sr.Join(second) {
		t.Fatal("Join after Close accepted")
	}
}

// TestStripeWriterJoin: a handle that joins while the first one is stuck takes chunks at once;
// the file is whole, the hash is of the stream in order, and add after the copy is refused.
func TestStripeWriterJoin(t *testing.T) {
	data := make([]byte, 1<<20+77)
	_, _ = rand.Read(data)
	var mu sync.Mutex
	gate := make(chan struct{})
	var once sync.Once
	var file []byte
	first := &gatedAt{mu: &mu, data: &file, gate: gate}
	other := &gatedAt{mu: &mu, data: &file}
	other.after = func() { once.Do(func() { close(gate) }) } // the first handle waits for the second's first write

	w := newStripeWriter(buffers(4*StripeChunksPerChannel, 16<<10), StripeChunksPerChannel)
	w.add(first)
	go w.add(other)
	h := sha256.New()
	n, err := w.copy(context.Background(), bytes.NewReader(data), h)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("copy: %d, %v", n, err)
	}
	if !bytes.Equal(file, data) {
		t.Fatal("the striped write produced different bytes")
	}
	if sum := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), sum[:]) {
		t.Fatal("hash is not of the stream in order")
	}
	if other.calls.Load() == 0 {
		t.Fatal("the joined handle wrote nothing")
	}
	if w.add(other) {
		t.Fatal("add after the copy accepted")
	}
}

// stallAt is a handle to data whose first read at offset stallOff blocks until release is
// closed; every other read, a second read of that chunk included, answers at once. Which of the
// handles sharing it takes the chunk first does not matter: that read is the stalled one.
type stallAt struct {
	data     []byte
	stallOff int64
	release  <-chan struct{}
	stalled  chan struct{}
	first    atomic.Bool
}

func (s *stallAt) ReadAt(p []byte, off int64) (int, error) {
	if off == s.stallOff && s.first.CompareAndSwap(false, true) {
		close(s.stalled)
		<-s.release
	}
	if off >= int64(len(s.data)) {
		return 0, io.EOF
	}
	n := copy(p, s.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// TestStripedReaderHedgesStalledHead: a channel that stalls on its chunk does not hold the
// rest of the download: the chunk is read again on another handle and the bytes come out whole
// and in order while the stalled read still hangs. Without a spare buffer (fewer than three)
// nothing is read twice, and the download waits for the stalled read.
func TestStripedReaderHedgesStalledHead(t *testing.T) {
	const chunk = 64 << 10
	data := make([]byte, 8*chunk+77)
	_, _ = rand.Read(data)
	for _, tc := range []struct {
		name   string
		bufs   int
		hedged bool
	}{
		{"spare buffer: hedged", 4, true},
		{"two buffers: no hedge", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			// Two handles, one reader each; the head chunk's first read stalls, on whichever
			// handle takes it (under load one reader may take every chunk before the other runs).
			slow := &stallAt{data: data, release: release, stalled: make(chan struct{})}
			sr := NewStripedReader([]io.ReaderAt{slow, slow}, int64(len(data)), buffers(tc.bufs, chunk), 1)
			type result struct {
				b   []byte
				err error
			}
			done := make(chan result, 1)
			go func() {
				b, err := io.ReadAll(sr)
				done <- result{b, err}
			}()
			<-slow.stalled
			if !tc.hedged {
				select {
				case r := <-done:
					t.Fatalf("download ended (%d bytes, %v) while a chunk's only read hangs", len(r.b), r.err)
				case <-time.After(200 * time.Millisecond): // no hedge can happen: nothing to await
				}
				close(release)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				close(release)
				t.Fatal("the download waited for the stalled read")
			}
			if r.err != nil || !bytes.Equal(r.b, data) {
				t.Fatalf("read %d bytes (%v), want the file's %d in order", len(r.b), r.err, len(data))
			}
			if got := sr.Hedged(); (got > 0) != tc.hedged {
				t.Fatalf("%d hedged chunks", got)
			}
			if tc.hedged {
				close(release)
			}
			if err := sr.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// writeCounter records the bytes and the size of each Write.
type writeCounter struct {
	bytes.Buffer
	sizes []int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// TestStripedReaderWriteNTo: WriteNTo hands out whole chunks in one Write each, continues where
// a Read stopped, stops at n inside a chunk (the next Read goes on from there), and at the end of
// the file returns the count without an error.
func TestStripedReaderWriteNTo(t *testing.T) {
	const chunk = 16 << 10
	data := make([]byte, 5*chunk+77)
	_, _ = rand.Read(data)
	var mu sync.Mutex
	h := &gatedAt{mu: &mu, data: &data}
	sr := NewStripedReader([]io.ReaderAt{h}, int64(len(data)), buffers(2, chunk), StripeChunksPerChannel)
	defer sr.Close()

	head := make([]byte, 100)
	if _, err := io.ReadFull(sr, head); err != nil {
		t.Fatal(err)
	}
	var w writeCounter
	n, err := sr.WriteNTo(&w, 2*chunk)
	if err != nil || n != 2*chunk {
		t.Fatalf("WriteNTo(2 chunks) = %d, %v", n, err)
	}
	if want := []int{chunk - 100, chunk, 100}; !slices.Equal(w.sizes, want) {
		t.Fatalf("write sizes %v, want %v (the rest of a chunk, a whole chunk, then up to n)", w.sizes, want)
	}
	mid := make([]byte, 10)
	if _, err := io.ReadFull(sr, mid); err != nil {
		t.Fatal(err)
	}
	w2 := &writeCounter{}
	n, err = sr.WriteNTo(w2, int64(len(data)))
	if err != nil || n != int64(len(data))-2*chunk-110 {
		t.Fatalf("WriteNTo past the end = %d, %v; want %d, nil", n, err, len(data)-2*chunk-110)
	}
	got := append(append(append(head, w.Bytes()...), mid...), w2.Bytes()...)
	if !bytes.Equal(got, data) {
		t.Fatal("Read and WriteNTo together returned different bytes")
	}
	if n, err := sr.WriteNTo(w2, 1); n != 0 || err != nil {
		t.Fatalf("WriteNTo at the end = %d, %v; want 0, nil", n, err)
	}
}

// TestJoinOn: channels that arrive together are all opened and joined, stop returns every
// handle join took, a handle join refuses is closed, and a channel sent after stop stays
// unopened with its sender.
func TestJoinOn(t *testing.T) {
	e := newEnv(t)
	p := e.dir + "/joined.bin"
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	clients := make([]*sftp.Client, 4)
	for i := range clients {
		c, err := sftp.NewClient(e.conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	chans := make(chan *sftp.Client, len(clients))
	for _, c := range clients[:3] {
		chans <- c
	}
	var mu sync.Mutex
	var offered []*sftp.File
	stop := JoinOn(chans, p, os.O_RDONLY, func(h *sftp.File) bool {
		mu.Lock()
		defer mu.Unlock()
		offered = append(offered, h)
		return len(offered) != 2 // the second handle is refused
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(offered)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 channels joined", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	joined := stop()
	chans <- clients[3]
	if len(joined) != 2 {
		t.Fatalf("stop returned %d handles, want the 2 join took", len(joined))
	}
	for _, h := range joined {
		b := make([]byte, 4)
		if _, err := h.ReadAt(b, 3); err != nil || string(b) != "3456" {
			t.Fatalf("joined handle reads %q, %v", b, err)
		}
		_ = h.Close()
	}
	var refused *sftp.File
	for _, h := range offered {
		if !slices.Contains(joined, h) {
			refused = h
		}
	}
	if _, err := refused.ReadAt(make([]byte, 1), 0); err == nil {
		t.Fatal("the refused handle was left open")
	}
	if len(chans) != 1 {
		t.Fatal("a channel sent after stop was taken")
	}
}

// barrierCloser's Close returns only once every closer of its set has been entered, so closing
// them one after another never finishes; it fails with err.
type barrierCloser struct {
	entered *atomic.Int32
	all     chan struct{}
	n       int32
	err     error
}

func (b barrierCloser) Close() error {
	if b.entered.Add(1) == b.n {
		close(b.all)
	}
	<-b.all
	return b.err
}

// TestCloseAllAtOnce: the stripe handles of an upload are closed all at once (each close is a
// round trip on a long path), and a failed close is reported however often the result is asked.
func TestCloseAllAtOnce(t *testing.T) {
	boom := errors.New("late write failure")
	for _, tc := range []struct {
		name string
		errs []error
		want error
	}{
		{"none", nil, nil},
		{"all fine", []error{nil, nil, nil, nil}, nil},
		{"one fails", []error{nil, nil, boom, nil}, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var entered atomic.Int32
			all := make(chan struct{})
			cs := make([]barrierCloser, len(tc.errs))
			for i, err := range tc.errs {
				cs[i] = barrierCloser{entered: &entered, all: all, n: int32(len(tc.errs)), err: err}
			}
			done := make(chan error, 2)
			closed := closeAll(cs)
			go func() { done <- closed(); done <- closed() }()
			for range 2 {
				select {
				case err := <-done:
					if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
						t.Fatalf("closeAll = %v, want %v", err, tc.want)
					}
				case <-t.Context().Done():
					t.Fatalf("closes did not finish: %d of %d entered (closed one after another?)", entered.Load(), len(tc.errs))
				}
			}
		})
	}
}
