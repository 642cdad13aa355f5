// Package s3test starts a real S3 server for tests: versitygw (Apache-2.0) with its posix
// backend, on a free loopback port, storing objects as plain files in a temporary directory.
// The binary is built from the module in tools/versitygw (pinned there, so its dependencies stay
// out of sshapi's go.mod) into build/bin/versitygw the first time it is needed, or taken from
// $SSHAPI_VERSITYGW. There is no fake: tests that need S3 get this server or fail.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sshapi/sshapi/internal/toolbin"
)

// Server is a running versitygw.
type Server struct {
	// Endpoint is the base URL (http://127.0.0.1:PORT).
	Endpoint string
	// AccessKeyID and SecretAccessKey are the root credential.
	AccessKeyID, SecretAccessKey string
	// Dir is the posix backend's top directory: each bucket is a directory in it.
	Dir string

	addr string
	cmd  *exec.Cmd
	done chan struct{}
	log  *bytes.Buffer
	mu   sync.Mutex
}

// New starts a server for tb and stops it when tb ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start(context.Background(), tb.TempDir())
	if err != nil {
		tb.Fatalf("s3test: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Start runs versitygw on a free loopback port with dir as its posix top directory.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{Endpoint: "http://" + addr, AccessKeyID: "AK" + randomHex(8), SecretAccessKey: randomHex(20), Dir: dir,
		addr: addr, log: &bytes.Buffer{}}
	if err := s.run(ctx, bin); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts the server process on s.addr and waits until it answers.
func (s *Server) run(ctx context.Context, bin string) error {
	s.done = make(chan struct{})
	s.cmd = exec.Command(bin, "--port", s.addr, "--quiet", "posix", s.Dir)
	// The credential goes by environment, not argv, where any local user could read it.
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKeyID, "ROOT_SECRET_ACCESS_KEY="+s.SecretAccessKey)
	s.cmd.Stdout, s.cmd.Stderr = s, s
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	done := s.done
	cmd := s.cmd
	go func() { _ = cmd.Wait(); close(done) }()
	if err := s.waitReady(ctx, s.addr); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// Restart starts the server again after Stop or Kill, on the same port, directory and
// credential: what it stored (objects, incomplete multipart uploads) is there again.
func (s *Server) Restart(ctx context.Context) error {
	select {
	case <-s.done:
	default:
		return errors.New("s3test: restart of a running server")
	}
	bin, err := Binary()
	if err != nil {
		return err
	}
	return s.run(ctx, bin)
}

// Write collects the server's output (for failure messages).
func (s *Server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log.Len() < 1<<20 {
		s.log.Write(p)
	}
	return len(p), nil
}

// waitReady waits until the server answers HTTP.
func (s *Server) waitReady(ctx context.Context, addr string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-s.done:
			s.mu.Lock()
			defer s.mu.Unlock()
			return fmt.Errorf("versitygw exited: %s", s.log.String())
		default:
		}
		res, err := http.Get("http://" + addr + "/")
		if err == nil {
			res.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("versitygw at %s not ready: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends the server by its PID and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Kill ends the server abruptly (SIGKILL), as a crash would; Restart brings it back.
func (s *Server) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Bucket creates a bucket with a fresh name and returns it.
func (s *Server) Bucket(tb testing.TB) string {
	tb.Helper()
	name := "b-" + randomHex(6)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, "")})
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		tb.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// Binary returns the versitygw binary, built from tools/versitygw into build/bin/versitygw under
// the module root when missing or older than that module's go.mod ($SSHAPI_VERSITYGW overrides).
func Binary() (string, error) {
	return toolbin.Binary("versitygw", "SSHAPI_VERSITYGW", "github.com/versity/versitygw/cmd/versitygw", "go.mod")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
