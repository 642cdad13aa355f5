package sshpool

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// TestSFTPInitWithSubsystemRequest: the SFTP client's first message goes out right behind the
// subsystem request, before its answer, saving a round trip on every new SFTP channel. The
// server here (x/crypto's, serving pkg/sftp's server) answers the subsystem request only once
// the SSH_FXP_INIT behind it has arrived, so a client that waited for the answer first would
// never get one (and fails on its open timeout). Stock sshd's handling of the same order is
// what every other SFTP test of this package runs.
func TestSFTPInitWithSubsystemRequest(t *testing.T) {
	hostKey, err := sshtest.NewPrivateKey("ed25519", 0)
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, err := ssh.NewSignerFromSigner(hostKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(hostSigner)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { served <- serveSFTPAfterInit(ln, cfg, t.TempDir()) }()

	p := New(Config{OpenTimeout: 10 * time.Second}, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	tg := Target{Key: Key{System: "s", User: "u"}, Addr: ln.Addr().String(), MaxSessions: 10,
		Config: &ssh.ClientConfig{User: "u", HostKeyCallback: ssh.FixedHostKey(hostSigner.PublicKey())}}
	s, err := p.SFTP(ctx, tg)
	if err != nil {
		t.Fatalf("SFTP: %v", err)
	}
	if _, err := s.Getwd(); err != nil {
		t.Fatalf("getwd: %v", err)
	}
	s.Done(nil)
	p.Stop(ctx)
	ln.Close()
	if err := <-served; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// serveSFTPAfterInit serves one SSH connection from ln whose session channels answer a
// subsystem request for sftp only after reading the SSH_FXP_INIT that follows it.
func serveSFTPAfterInit(ln net.Listener, cfg *ssh.ServerConfig, dir string) error {
	nc, err := ln.Accept()
	if err != nil {
		return err
	}
	defer nc.Close()
	_, chans, reqs, err := ssh.NewServerConn(nc, cfg)
	if err != nil {
		return err
	}
	go ssh.DiscardRequests(reqs)
	for nch := range chans {
		ch, creqs, err := nch.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer ch.Close()
			for r := range creqs {
				if r.Type != "subsystem" {
					_ = r.Reply(false, nil)
					continue
				}
				// The INIT: a 4-byte length, then type 1 (SSH_FXP_INIT) and the version.
				init := make([]byte, 9)
				if _, err := io.ReadFull(ch, init); err != nil || init[4] != 1 {
					_ = r.Reply(false, nil)
					return
				}
				_ = r.Reply(true, nil)
				go ssh.DiscardRequests(creqs)
				srv, err := sftp.NewServer(struct {
					io.Reader
					io.WriteCloser
				}{io.MultiReader(bytes.NewReader(init), ch), ch}, sftp.WithServerWorkingDirectory(dir))
				if err != nil {
					return
				}
				if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
					return
				}
				return
			}
		}()
	}
	return nil
}
