package soak

import (
	"io"
	"net"
	"sync"
)

// stallProxy forwards TCP connections to an upstream (the sshd) and can black-hole the path for
// a while: no byte moves in either direction and new connections are accepted but not forwarded
// until it resumes, as a stalled network or a partition that heals does. Connections survive the
// stall (nothing is reset), so the client's keepalives and timeouts are what notice it.
type stallProxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	gate  chan struct{} // closed while traffic flows
	conns map[net.Conn]bool
	done  chan struct{}
}

func startStallProxy(upstream string) (*stallProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &stallProxy{ln: ln, upstream: upstream, gate: make(chan struct{}), conns: map[net.Conn]bool{}, done: make(chan struct{})}
	close(p.gate)
	go p.accept()
	return p, nil
}

func (p *stallProxy) addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

// wait blocks while the path is black-holed; false once the proxy is closed.
func (p *stallProxy) wait() bool {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	select {
	case <-g:
		return true
	case <-p.done:
		return false
	}
}

// stall black-holes the path until resume.
func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *stallProxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *stallProxy) serve(c net.Conn) {
	defer c.Close()
	if !p.track(c, true) {
		return
	}
	defer p.track(c, false)
	if !p.wait() {
		return
	}
	u, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer u.Close()
	if !p.track(u, true) {
		return
	}
	defer p.track(u, false)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(u, c) }()
	go func() { defer wg.Done(); p.pipe(c, u) }()
	wg.Wait()
}

// pipe copies src to dst, holding each chunk while the path is black-holed.
func (p *stallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	defer func() {
		if t, ok := dst.(*net.TCPConn); ok {
			_ = t.CloseWrite()
		}
	}()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}

// Close stops accepting and ends every connection.
func (p *stallProxy) Close() {
	p.mu.Lock()
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
}
