package sshtest

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestJumpPair checks the fixture's promise: the target answers through the jump host and is
// refused when dialed from the test's own namespace.
func TestJumpPair(t *testing.T) {
	p := NewJumpPair(t, Options{})
	if _, err := net.DialTimeout("tcp", p.Target.Addr, 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("direct dial to the target %s: %v, want connection refused", p.Target.Addr, err)
	}
	jc, err := ssh.Dial("tcp", p.Jump.Addr, p.Jump.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer jc.Close()
	nc, err := jc.Dial("tcp", p.Target.Addr)
	if err != nil {
		t.Fatal(err)
	}
	sc, chans, reqs, err := ssh.NewClientConn(nc, p.Target.Addr, p.Target.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := ssh.NewClient(sc, chans, reqs)
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.Output("echo via-jump")
	if err != nil || strings.TrimSpace(string(out)) != "via-jump" {
		t.Fatalf("command through the jump host: %q, %v", out, err)
	}
	if !strings.Contains(p.Jump.Log(), "server_request_direct_tcpip") {
		t.Fatalf("jump sshd log has no direct-tcpip request:\n%s", p.Jump.Log())
	}
}
