package sshtest

import (
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func TestServerRunsCommandsAndRestarts(t *testing.T) {
	s := New(t, Options{})
	run := func() string {
		t.Helper()
		c, err := ssh.Dial("tcp", s.Addr, s.ClientConfig())
		if err != nil {
			t.Fatalf("dial: %v\n%s", err, s.Log())
		}
		defer c.Close()
		sess, err := c.NewSession()
		if err != nil {
			t.Fatalf("session: %v", err)
		}
		defer sess.Close()
		out, err := sess.Output("echo $0; id -un")
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		return string(out)
	}
	held, err := ssh.Dial("tcp", s.Addr, s.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	out := run()
	if !strings.Contains(out, s.User) || strings.Contains(out, "bash") {
		t.Fatalf("want plain shell as %s, got %q", s.User, out)
	}
	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := held.SendRequest("keepalive@openssh.com", true, nil); err == nil {
		t.Fatal("a connection made before the restart still works: restart must drop it")
	}
	if out := run(); !strings.Contains(out, s.User) {
		t.Fatalf("after restart: %q", out)
	}
}
