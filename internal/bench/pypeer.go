package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// PyPeer drives a Python peer (bench/peers/*.py) over its line protocol: the peer keeps its own
// SSH connection pool, this side schedules the requests and measures them, so every peer is
// measured by the same engine.
type PyPeer struct {
	// Python is the interpreter (e.g. bench/.venv/bin/python); Script the peer's file.
	Python, Script string
	// Endpoint is the SSH server; Conns and Sessions size the peer's pool.
	Endpoint   SSHEndpoint
	Conns      int
	Sessions   int
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	wmu        sync.Mutex
	pmu        sync.Mutex
	pending    map[uint64]chan peerReply
	nextID     atomic.Uint64
	readerDone chan struct{}
	exited     chan error
	stderr     *tailBuffer
	versions   map[string]string
}

type peerReply struct {
	ID    uint64 `json:"id"`
	OK    bool   `json:"ok"`
	Kind  string `json:"kind"`
	Error string `json:"error"`
}

// Start launches the peer and waits until it has opened its pool.
func (p *PyPeer) Start(ctx context.Context) error {
	p.pending = map[uint64]chan peerReply{}
	p.stderr = &tailBuffer{max: 4096}
	e := p.Endpoint
	p.cmd = exec.Command(p.Python, p.Script,
		"--host", e.Host, "--port", strconv.Itoa(e.Port), "--user", e.User, "--key", e.KeyFile,
		"--known-hosts", e.KnownHostsFile, "--host-key", e.HostKey,
		"--conns", strconv.Itoa(max(p.Conns, 1)), "--sessions", strconv.Itoa(max(p.Sessions, 1)))
	p.cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return fmt.Errorf("peer stdin: %w", err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("peer stdout: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start peer %s: %w", p.Script, err)
	}
	p.exited = make(chan error, 1)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ready := make(chan error, 1)
	p.readerDone = make(chan struct{})
	go p.read(sc, ready)
	select {
	case err = <-ready:
	case <-time.After(60 * time.Second):
		err = errors.New("not ready within 60s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = p.Stop()
		return fmt.Errorf("peer %s: %w: %s", p.Script, err, p.stderr.String())
	}
	return nil
}

// read owns the peer's stdout until it closes; then it reaps the process.
func (p *PyPeer) read(sc *bufio.Scanner, ready chan<- error) {
	defer close(p.readerDone)
	first := true
	for sc.Scan() {
		if first {
			first = false
			var r struct {
				Ready    bool              `json:"ready"`
				Versions map[string]string `json:"versions"`
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil || !r.Ready {
				ready <- fmt.Errorf("bad ready line %q", sc.Text())
				continue
			}
			p.versions = r.Versions
			ready <- nil
			continue
		}
		var r peerReply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		p.pmu.Lock()
		ch := p.pending[r.ID]
		delete(p.pending, r.ID)
		p.pmu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if first {
		ready <- errors.New("exited before it was ready")
	}
	p.exited <- p.cmd.Wait()
	// Fail whatever is still waiting.
	p.pmu.Lock()
	for id, ch := range p.pending {
		ch <- peerReply{ID: id, Kind: "peer exited", Error: p.stderr.String()}
		delete(p.pending, id)
	}
	p.pmu.Unlock()
}

// Versions reports the library versions the peer announced.
func (p *PyPeer) Versions() map[string]string { return p.versions }

func (p *PyPeer) call(ctx context.Context, req map[string]any) error {
	id := p.nextID.Add(1)
	req["id"] = id
	if d, ok := ctx.Deadline(); ok {
		req["timeout"] = max(time.Until(d).Seconds(), 0.001)
	}
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode peer request: %w", err)
	}
	ch := make(chan peerReply, 1)
	p.pmu.Lock()
	p.pending[id] = ch
	p.pmu.Unlock()
	p.wmu.Lock()
	_, err = p.stdin.Write(append(line, '\n'))
	p.wmu.Unlock()
	if err != nil {
		p.pmu.Lock()
		delete(p.pending, id)
		p.pmu.Unlock()
		return fmt.Errorf("write to peer: %w", err)
	}
	select {
	case r := <-ch:
		if r.OK {
			return nil
		}
		return &KindError{K: r.Kind, Msg: r.Error}
	case <-ctx.Done():
		p.pmu.Lock()
		delete(p.pending, id)
		p.pmu.Unlock()
		return fmt.Errorf("peer request: %w", ctx.Err())
	}
}

// Op returns an Op that runs command on one of the peer's pooled connections.
func (p *PyPeer) Op(command string) Op {
	return func(ctx context.Context) error {
		return p.call(ctx, map[string]any{"op": "run", "command": command})
	}
}

// ConnectOp returns an Op that opens, authenticates and closes one fresh SSH connection.
func (p *PyPeer) ConnectOp() Op {
	return func(ctx context.Context) error {
		return p.call(ctx, map[string]any{"op": "connect"})
	}
}

// Stop closes the peer's stdin, waits up to 30s for it to answer what it started and exit, and
// kills it otherwise.
func (p *PyPeer) Stop() error {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	_ = p.stdin.Close()
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-p.exited
	}
	<-p.readerDone
	p.cmd = nil
	if err != nil {
		return fmt.Errorf("peer %s: %w: %s", p.Script, err, p.stderr.String())
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// Write keeps the tail of what is written.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

// String returns the kept tail.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
