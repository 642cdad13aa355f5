package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Peer names accepted by --compare.
const (
	// PeerOpenSSH runs `ssh` with a new connection for every request.
	PeerOpenSSH = "openssh"
	// PeerOpenSSHMux runs `ssh -S` clients over ControlMaster connections the tool opens.
	PeerOpenSSHMux = "openssh-mux"
	// PeerAsyncSSH is bench/peers/asyncssh_peer.py: a pool of asyncssh connections.
	PeerAsyncSSH = "asyncssh"
	// PeerParamiko is bench/peers/paramiko_peer.py: a pool of paramiko transports, TCP_NODELAY.
	PeerParamiko = "paramiko"
)

// AllPeers lists every peer in report order.
var AllPeers = []string{PeerOpenSSH, PeerOpenSSHMux, PeerAsyncSSH, PeerParamiko}

// ParsePeers parses a --compare list ("all", "none", "" or comma-separated names).
func ParsePeers(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "none":
		return []string{}, nil
	case "all":
		return slices.Clone(AllPeers), nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(AllPeers, p) {
			return nil, fmt.Errorf("unknown peer %q (want %s or all)", p, strings.Join(AllPeers, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Targets are the things one bench invocation measures side by side: sshapi (over HTTP) and
// the peers that reach the same SSH server directly. Start opens the peers' connections; Stop
// closes them.
type Targets struct {
	// API and System reach sshapi; nil API leaves sshapi out.
	API    *API
	System string
	// Endpoint is the SSH server the peers use (the one System points at).
	Endpoint SSHEndpoint
	// Peers to compare with (see AllPeers).
	Peers []string
	// Python runs the Python peers found in PeersDir.
	Python, PeersDir string
	// Conns and Sessions size the pooled peers: connections, and channels per connection
	// (defaults 6 and 8, sshapi's defaults for a stock server).
	Conns, Sessions int

	mux *Mux
	py  map[string]*PyPeer
}

// Names lists the targets in report order, sshapi first.
func (t *Targets) Names() []string {
	var out []string
	if t.API != nil {
		out = append(out, BaselineTarget)
	}
	return append(out, t.Peers...)
}

// Start opens the peers' master connections and pools.
func (t *Targets) Start(ctx context.Context) error {
	if t.Conns <= 0 {
		t.Conns = 6
	}
	if t.Sessions <= 0 {
		t.Sessions = 8
	}
	t.py = map[string]*PyPeer{}
	for _, p := range t.Peers {
		var err error
		switch p {
		case PeerOpenSSHMux:
			t.mux = NewMux(t.Endpoint, t.Conns)
			err = t.mux.Start(ctx)
		case PeerAsyncSSH, PeerParamiko:
			pp := &PyPeer{Python: t.Python, Script: filepath.Join(t.PeersDir, p+"_peer.py"), Endpoint: t.Endpoint, Conns: t.Conns, Sessions: t.Sessions}
			if err = pp.Start(ctx); err == nil {
				t.py[p] = pp
			}
		}
		if err != nil {
			_ = t.Stop()
			return fmt.Errorf("start peer %s: %w", p, err)
		}
	}
	return nil
}

// Stop closes every peer.
func (t *Targets) Stop() error {
	var errs []error
	if t.mux != nil {
		errs = append(errs, t.mux.Stop())
		t.mux = nil
	}
	for name, p := range t.py {
		errs = append(errs, p.Stop())
		delete(t.py, name)
	}
	return errors.Join(errs...)
}

// Versions reports the Python peers' library versions.
func (t *Targets) Versions() map[string]map[string]string {
	out := map[string]map[string]string{}
	for name, p := range t.py {
		out[name] = p.Versions()
	}
	return out
}

// CommandOp returns the Op that runs command through target.
func (t *Targets) CommandOp(target, command string) (Op, error) {
	switch target {
	case BaselineTarget:
		if t.API != nil {
			return t.API.CommandOp(t.System, command), nil
		}
	case PeerOpenSSH:
		return OpenSSHOp(t.Endpoint, command), nil
	case PeerOpenSSHMux:
		if t.mux != nil {
			return t.mux.Op(command), nil
		}
	case PeerAsyncSSH, PeerParamiko:
		if p := t.py[target]; p != nil {
			return p.Op(command), nil
		}
	}
	return nil, fmt.Errorf("target %q is not started", target)
}

// ConnectOp returns the Op that establishes one fresh authenticated SSH connection through
// target, or nil if the target has no such operation (the multiplexed peer never opens one).
// OpenSSH's client cannot stop after authentication, so its Op also runs `true`.
func (t *Targets) ConnectOp(target string) Op {
	switch target {
	case BaselineTarget:
		if t.API != nil {
			return t.API.CheckOp(t.System)
		}
	case PeerOpenSSH:
		return OpenSSHOp(t.Endpoint, "true")
	case PeerAsyncSSH, PeerParamiko:
		if p := t.py[target]; p != nil {
			return p.ConnectOp()
		}
	}
	return nil
}
