package wanem

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const mib = 1 << 20

// server is a TCP server on 127.0.0.1 that runs a handler per connection; tests use it as the
// proxy's upstream. close stops it and waits for every handler.
type server struct {
	ln *net.TCPListener
	wg sync.WaitGroup

	mu     sync.Mutex
	conns  map[*net.TCPConn]struct{}
	closed bool
}

// startServer starts a server running handle for each connection and returns its address.
// The server is closed when the test ends.
func startServer(t testing.TB, handle func(c *net.TCPConn)) string {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, conns: make(map[*net.TCPConn]struct{})}
	s.wg.Go(func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				_ = c.Close()
				return
			}
			s.conns[c] = struct{}{}
			s.wg.Go(func() {
				defer func() {
					_ = c.Close()
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
				}()
				handle(c)
			})
			s.mu.Unlock()
		}
	})
	t.Cleanup(s.close)
	return ln.Addr().String()
}

// close stops accepting, closes open connections and waits for the handlers.
func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	_ = s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// echo writes back everything it reads and half-closes when the client does.
func echo(c *net.TCPConn) {
	if _, err := io.Copy(c, c); err == nil {
		_ = c.CloseWrite()
	}
}

// sink reads until EOF and then writes the byte count as 8 bytes, big-endian.
func sink(c *net.TCPConn) {
	buf := make([]byte, 256<<10)
	var total uint64
	for {
		n, err := c.Read(buf)
		total += uint64(n)
		if err != nil {
			break
		}
	}
	_ = binary.Write(c, binary.BigEndian, total)
}

// acker reads window bytes at a time and answers each full window with one byte: an
// application-level flow-control window, like an SSH channel's.
func acker(window int) func(c *net.TCPConn) {
	return func(c *net.TCPConn) {
		buf := make([]byte, 256<<10)
		for {
			for left := window; left > 0; {
				n, err := c.Read(buf[:min(left, len(buf))])
				left -= n
				if err != nil {
					return
				}
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		}
	}
}

// startProxy starts a proxy for cfg on a free loopback port and stops it when the test ends.
func startProxy(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return p
}

// dial connects to addr and closes the connection when the test ends.
func dial(t testing.TB, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

func TestRoundTripDelay(t *testing.T) {
	tests := []struct {
		name string
		rtt  time.Duration
		rate int64
	}{
		{name: "no delay", rtt: 0},
		{name: "20ms", rtt: 20 * time.Millisecond},
		{name: "80ms", rtt: 80 * time.Millisecond},
		{name: "50ms on a 1gbit link", rtt: 50 * time.Millisecond, rate: 125_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startServer(t, echo)
			p := startProxy(t, Config{Upstream: up, RTT: tt.rtt, Rate: tt.rate})
			c := dial(t, p.Addr().String())
			msg := []byte("ping 0123456789abcdef0123456789abcdef")
			got := make([]byte, len(msg))
			var lo, hi time.Duration
			for i := range 5 {
				start := time.Now()
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				d := time.Since(start)
				if !bytes.Equal(got, msg) {
					t.Fatalf("echo = %q, want %q", got, msg)
				}
				if i == 0 || d < lo {
					lo = d
				}
				hi = max(hi, d)
			}
			t.Logf("round trips: min %v, max %v (rtt %v)", lo, hi, tt.rtt)
			if lo < tt.rtt {
				t.Errorf("fastest round trip %v is shorter than rtt %v", lo, tt.rtt)
			}
			// The lower bound is the emulator's contract; the upper one only catches gross extra
			// delay, on the fastest round trip so a loaded machine does not fail the test.
			if lo >= tt.rtt+40*time.Millisecond {
				t.Errorf("fastest round trip %v is more than 40ms over rtt %v", lo, tt.rtt)
			}
		})
	}
}

// sendAll writes n bytes to a sink through c, half-closes and waits for the sink's count.
func sendAll(c *net.TCPConn, n int) error {
	buf := make([]byte, 256<<10)
	for left := n; left > 0; {
		w, err := c.Write(buf[:min(left, len(buf))])
		left -= w
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		return fmt.Errorf("close write: %w", err)
	}
	var got uint64
	if err := binary.Read(c, binary.BigEndian, &got); err != nil {
		return fmt.Errorf("read count: %w", err)
	}
	if got != uint64(n) {
		return fmt.Errorf("sink got %d bytes, want %d", got, n)
	}
	return nil
}

// minRatio is the lower bound of a throughput test, against the cap or the model: low enough
// for a machine loaded many times over, high enough that a stall (a copy that waits for a
// timeout or a lost wake-up) fails.
const minRatio = 0.1

func TestRateCap(t *testing.T) {
	tests := []struct {
		name      string
		rate      int64
		rtt       time.Duration
		streams   int
		perStream int
	}{
		{name: "one stream at 20MiB/s", rate: 20 * mib, streams: 1, perStream: 12 * mib},
		{name: "three streams share 20MiB/s", rate: 20 * mib, rtt: 10 * time.Millisecond, streams: 3, perStream: 4 * mib},
		{name: "one stream at 40MiB/s over 30ms", rate: 40 * mib, rtt: 30 * time.Millisecond, streams: 1, perStream: 24 * mib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startServer(t, sink)
			p := startProxy(t, Config{Upstream: up, RTT: tt.rtt, Rate: tt.rate})
			conns := make([]*net.TCPConn, tt.streams)
			for i := range conns {
				conns[i] = dial(t, p.Addr().String())
			}
			errs := make(chan error, tt.streams)
			start := time.Now()
			for _, c := range conns {
				go func() { errs <- sendAll(c, tt.perStream) }()
			}
			for range conns {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			total := tt.streams * tt.perStream
			got := float64(total) / elapsed.Seconds()
			ratio := got / float64(tt.rate)
			t.Logf("%d bytes in %v: %.1f MiB/s, %.2f of the %d MiB/s cap", total, elapsed, got/mib, ratio, tt.rate/mib)
			// Never above the cap (the contract); the loose lower bound only catches a stall, since
			// a loaded machine (the race detector, parallel packages, benchmarks beside the suite)
			// slows the copy: 0.30 of the cap was seen at a load average of 14 on 2 cores.
			if ratio < minRatio || ratio > 1.05 {
				t.Errorf("throughput %.1f MiB/s is not within [%.2f, 1.05] of the %d MiB/s cap", got/mib, minRatio, tt.rate/mib)
			}
			if st := p.Stats(); st.ToUpstream != int64(total) {
				t.Errorf("Stats().ToUpstream = %d, want %d", st.ToUpstream, total)
			}
		})
	}
}

// TestWindowLimited shows the long-fat-network effect the proxy exists for: a stream with a
// fixed application window moves one window per round trip however fast the link is, and
// several such streams in parallel fill the link.
func TestWindowLimited(t *testing.T) {
	const rtt = 60 * time.Millisecond
	tests := []struct {
		name    string
		rate    int64
		window  int
		streams int
		rounds  int
	}{
		{name: "one 1MiB window", window: 1 * mib, streams: 1, rounds: 6},
		{name: "one 2MiB window", window: 2 * mib, streams: 1, rounds: 6},
		{name: "three 2MiB windows striped", window: 2 * mib, streams: 3, rounds: 6},
		{name: "one 2MiB window on a 100MiB/s link", rate: 100 * mib, window: 2 * mib, streams: 1, rounds: 6},
		{name: "six 2MiB windows fill a 100MiB/s link", rate: 100 * mib, window: 2 * mib, streams: 6, rounds: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startServer(t, acker(tt.window))
			p := startProxy(t, Config{Upstream: up, RTT: rtt, Rate: tt.rate})
			conns := make([]*net.TCPConn, tt.streams)
			for i := range conns {
				conns[i] = dial(t, p.Addr().String())
			}
			// Each stream alone can do at most one window per (rtt + serialization of the
			// window); the link caps the sum.
			perStream := float64(tt.window) / rtt.Seconds()
			if tt.rate > 0 {
				perStream = float64(tt.window) / (rtt.Seconds() + float64(tt.window)/float64(tt.rate))
			}
			want := perStream * float64(tt.streams)
			if tt.rate > 0 {
				want = min(want, float64(tt.rate))
			}

			buf := make([]byte, tt.window)
			errs := make(chan error, tt.streams)
			start := time.Now()
			for _, c := range conns {
				go func() {
					ack := make([]byte, 1)
					for range tt.rounds {
						if _, err := c.Write(buf); err != nil {
							errs <- err
							return
						}
						if _, err := io.ReadFull(c, ack); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			for range conns {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			got := float64(tt.window*tt.rounds*tt.streams) / elapsed.Seconds()
			ratio := got / want
			t.Logf("%.1f MiB/s in %v; model %.1f MiB/s (ratio %.2f)", got/mib, elapsed, want/mib, ratio)
			// Above the window/RTT model would mean the delay was not applied; the loose lower bound
			// only catches a stall on a loaded machine (0.18 of the model was seen at a load
			// average of 14 on 2 cores).
			if ratio < minRatio || ratio > 1.05 {
				t.Errorf("throughput %.1f MiB/s is not within [%.2f, 1.05] of the expected %.1f MiB/s", got/mib, minRatio, want/mib)
			}
		})
	}
}

func TestHalfCloseAndReset(t *testing.T) {
	tests := []struct {
		name     string
		upstream func(c *net.TCPConn, got chan<- string)
		client   func(c *net.TCPConn) (string, error)
		// wantClient is what the client must read; wantUpstream what the upstream reports.
		wantClient, wantUpstream string
	}{
		{
			name: "client half-closes first",
			upstream: func(c *net.TCPConn, got chan<- string) {
				b, err := io.ReadAll(c)
				got <- fmt.Sprintf("%q %v", b, err)
				_, _ = fmt.Fprintf(c, "got %d bytes", len(b))
			},
			client: func(c *net.TCPConn) (string, error) {
				if _, err := c.Write([]byte("hello")); err != nil {
					return "", err
				}
				if err := c.CloseWrite(); err != nil {
					return "", err
				}
				b, err := io.ReadAll(c)
				return string(b), err
			},
			wantClient:   "got 5 bytes",
			wantUpstream: `"hello" <nil>`,
		},
		{
			name: "upstream half-closes first",
			upstream: func(c *net.TCPConn, got chan<- string) {
				_, _ = c.Write([]byte("banner"))
				_ = c.CloseWrite()
				b, err := io.ReadAll(c)
				got <- fmt.Sprintf("%q %v", b, err)
			},
			client: func(c *net.TCPConn) (string, error) {
				b, err := io.ReadAll(c) // returns only once the upstream's FIN came through
				if err != nil {
					return "", err
				}
				if _, err := c.Write([]byte("still talking")); err != nil {
					return "", err
				}
				return string(b), c.CloseWrite()
			},
			wantClient:   "banner",
			wantUpstream: `"still talking" <nil>`,
		},
		{
			name: "upstream reset reaches the client",
			upstream: func(c *net.TCPConn, got chan<- string) {
				b := make([]byte, 1)
				_, err := io.ReadFull(c, b)
				got <- fmt.Sprintf("%q %v", b, err)
				_ = c.SetLinger(0)
				_ = c.Close()
			},
			client: func(c *net.TCPConn) (string, error) {
				if _, err := c.Write([]byte("x")); err != nil {
					return "", err
				}
				_, err := c.Read(make([]byte, 1))
				if errors.Is(err, syscall.ECONNRESET) {
					return "reset", nil
				}
				return "", fmt.Errorf("read = %w, want a reset", err)
			},
			wantClient:   "reset",
			wantUpstream: `"x" <nil>`,
		},
		{
			name: "client reset reaches the upstream",
			upstream: func(c *net.TCPConn, got chan<- string) {
				_, err := io.ReadAll(c)
				got <- fmt.Sprint(errors.Is(err, syscall.ECONNRESET))
			},
			client: func(c *net.TCPConn) (string, error) {
				if _, err := c.Write([]byte("x")); err != nil {
					return "", err
				}
				_ = c.SetLinger(0)
				return "", c.Close()
			},
			wantClient:   "",
			wantUpstream: "true",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan string, 1)
			up := startServer(t, func(c *net.TCPConn) { tt.upstream(c, got) })
			p := startProxy(t, Config{Upstream: up, RTT: 20 * time.Millisecond})
			c := dial(t, p.Addr().String())
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			s, err := tt.client(c)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			if s != tt.wantClient {
				t.Errorf("client read %q, want %q", s, tt.wantClient)
			}
			select {
			case u := <-got:
				if u != tt.wantUpstream {
					t.Errorf("upstream saw %s, want %s", u, tt.wantUpstream)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("upstream did not finish")
			}
		})
	}
}

// TestBackpressure checks that the proxy stops reading when its buffer is full instead of
// swallowing everything the sender writes.
func TestBackpressure(t *testing.T) {
	tests := []struct {
		name   string
		buffer int64
		rate   int64
		rtt    time.Duration
	}{
		{name: "1MiB buffer on a 64MiB/s link", buffer: 1 * mib, rate: 64 * mib},
		{name: "default buffer on a 64MiB/s 50ms link", rate: 64 * mib, rtt: 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var received atomic.Int64
			up := startServer(t, func(c *net.TCPConn) {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					received.Add(int64(n))
					if err != nil {
						return
					}
				}
			})
			p := startProxy(t, Config{Upstream: up, RTT: tt.rtt, Rate: tt.rate, Buffer: tt.buffer})
			c := dial(t, p.Addr().String())
			var written atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Write(buf)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
			time.Sleep(500 * time.Millisecond)
			held := written.Load() - received.Load()
			_ = c.Close()
			<-done
			// Beyond the proxy's buffer only the kernel's socket buffers of the client leg
			// (a few MiB) may hold data; without the byte bound the proxy would queue up to
			// 1024 chunks of 64 KiB.
			limit := p.Config().Buffer + 8*mib
			t.Logf("written %d MiB, received %d MiB, held %.1f MiB (buffer %.1f MiB)",
				written.Load()/mib, received.Load()/mib, float64(held)/mib, float64(p.Config().Buffer)/mib)
			if held > limit {
				t.Errorf("%d bytes held between client and upstream, want at most %d", held, limit)
			}
		})
	}
}

func TestStopClosesEverything(t *testing.T) {
	tests := []struct {
		name  string
		rtt   time.Duration
		conns int
	}{
		{name: "idle and busy connections, 2s rtt", rtt: 2 * time.Second, conns: 4},
		{name: "no delay", rtt: 0, conns: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startServer(t, echo)
			before := runtime.NumGoroutine()

			p, err := New(Config{Listen: "127.0.0.1:0", Upstream: up, RTT: tt.rtt, Rate: 100 * mib})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			var conns []*net.TCPConn
			for i := range tt.conns {
				c := dial(t, p.Addr().String())
				if i > 0 { // the first one stays idle
					if _, err := c.Write(make([]byte, 256<<10)); err != nil {
						t.Fatal(err)
					}
				}
				conns = append(conns, c)
			}
			time.Sleep(50 * time.Millisecond)
			if got := p.Stats().Active; got != tt.conns {
				t.Errorf("Stats().Active = %d, want %d", got, tt.conns)
			}

			start := time.Now()
			if err := p.Stop(); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if d := time.Since(start); d > 200*time.Millisecond {
				t.Errorf("Stop took %v, want it prompt", d)
			}
			for _, c := range conns {
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				_, err := io.Copy(io.Discard, c)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Errorf("client connection still open after Stop")
				}
			}
			if _, err := net.DialTimeout("tcp", p.Addr().String(), time.Second); err == nil {
				t.Errorf("proxy still accepts connections after Stop")
			}
			if err := p.Stop(); err != nil {
				t.Errorf("second Stop: %v", err)
			}
			var after int
			for range 100 {
				if after = runtime.NumGoroutine(); after <= before {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if after > before {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines before, %d after Stop:\n%s", before, after, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

func TestStats(t *testing.T) {
	tests := []struct {
		name     string
		up, down int
	}{
		{name: "small", up: 10, down: 3},
		{name: "larger than a read", up: 3*mib + 17, down: mib + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startServer(t, func(c *net.TCPConn) {
				if _, err := io.Copy(io.Discard, c); err != nil {
					return
				}
				_, _ = c.Write(make([]byte, tt.down))
			})
			p := startProxy(t, Config{Upstream: up, RTT: 2 * time.Millisecond})
			c := dial(t, p.Addr().String())
			if _, err := c.Write(make([]byte, tt.up)); err != nil {
				t.Fatal(err)
			}
			_ = c.CloseWrite()
			n, err := io.Copy(io.Discard, c)
			if err != nil || n != int64(tt.down) {
				t.Fatalf("client read %d bytes, %v; want %d", n, err, tt.down)
			}
			var st Stats
			for range 100 {
				if st = p.Stats(); st.Active == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			want := Stats{ToUpstream: int64(tt.up), ToClient: int64(tt.down), Active: 0, Accepted: 1}
			if st != want {
				t.Errorf("Stats() = %+v, want %+v", st, want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		wantErr    string
		wantBuffer int64
	}{
		{name: "no upstream", cfg: Config{}, wantErr: "upstream"},
		{name: "negative rtt", cfg: Config{Upstream: "x:1", RTT: -time.Second}, wantErr: "rtt"},
		{name: "negative rate", cfg: Config{Upstream: "x:1", Rate: -1}, wantErr: "rate"},
		{name: "negative buffer", cfg: Config{Upstream: "x:1", Buffer: -1}, wantErr: "buffer"},
		{name: "defaults", cfg: Config{Upstream: "x:1"}, wantBuffer: 4 * mib},
		{name: "2xBDP of 1gbit at 100ms", cfg: Config{Upstream: "x:1", Rate: 125_000_000, RTT: 100 * time.Millisecond}, wantBuffer: 25_000_000},
		{name: "unlimited rate sized as 1gbit", cfg: Config{Upstream: "x:1", RTT: 100 * time.Millisecond}, wantBuffer: 25_000_000},
		{name: "explicit buffer", cfg: Config{Upstream: "x:1", Buffer: 12345}, wantBuffer: 12345},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New() error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Config().Buffer; got != tt.wantBuffer {
				t.Errorf("Buffer = %d, want %d", got, tt.wantBuffer)
			}
			if got := p.Config().Listen; got != "127.0.0.1:0" {
				t.Errorf("Listen = %q, want the loopback default", got)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) *Proxy
	}{
		{name: "bad listen address", setup: func(t *testing.T) *Proxy {
			p, err := New(Config{Listen: "256.0.0.1:0", Upstream: "127.0.0.1:1"})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{name: "started twice", setup: func(t *testing.T) *Proxy {
			return startProxy(t, Config{Upstream: "127.0.0.1:1"})
		}},
		{name: "start after stop", setup: func(t *testing.T) *Proxy {
			p, err := New(Config{Upstream: "127.0.0.1:1"})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.setup(t)
			if err := p.Start(context.Background()); err == nil {
				_ = p.Stop()
				t.Fatal("Start succeeded, want an error")
			}
		})
	}
}

// TestUnreachableUpstream checks that a client is reset, not left hanging, when the upstream
// refuses the connection.
func TestUnreachableUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	p := startProxy(t, Config{Upstream: dead, RTT: 10 * time.Millisecond})
	c := dial(t, p.Addr().String())
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read = %v, want a reset", err)
	}
}

// addrHandler is a slog.Handler that reports the "addr" attribute of every record.
type addrHandler struct{ addrs chan string }

func (h addrHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h addrHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h addrHandler) WithGroup(string) slog.Handler            { return h }
func (h addrHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "addr" {
			h.addrs <- a.Value.String()
		}
		return true
	})
	return nil
}

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "serves until canceled", cfg: Config{Listen: "127.0.0.1:0", RTT: 10 * time.Millisecond}},
		{name: "invalid config", cfg: Config{Listen: "127.0.0.1:0", Rate: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Upstream = startServer(t, echo)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h := addrHandler{addrs: make(chan string, 1)}
			res := make(chan error, 1)
			go func() { res <- Run(ctx, cfg, slog.New(h)) }()
			if tt.wantErr {
				if err := <-res; err == nil {
					t.Fatal("Run succeeded, want an error")
				}
				return
			}
			var addr string
			select {
			case addr = <-h.addrs:
			case err := <-res:
				t.Fatalf("Run returned early: %v", err)
			}
			c := dial(t, addr)
			if _, err := c.Write([]byte("hi")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 2)
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "hi" {
				t.Fatalf("echo through Run = %q, %v", got, err)
			}
			cancel()
			select {
			case err := <-res:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
		})
	}
}
