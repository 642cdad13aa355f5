// Package oidctest starts a real OpenID Connect provider for tests: zitadel/oidc's example OP
// (tools/oidcop, a module of its own so its dependencies stay out of sshapi's go.mod), built
// into build/bin/oidcop the first time it is needed, on a free loopback port. It is a real
// provider — discovery, the authorization code flow with PKCE, signed ID tokens, its own login
// form — not a mock.
package oidctest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/toolbin"
)

// Username and Password sign in at the provider's login form (the example's first user);
// Subject is that user's sub claim. The username's host part is the issuer's host.
const (
	Password = "verysecure"
	Subject  = "id1"
)

// Provider is a running OP.
type Provider struct {
	// Issuer is the provider's URL (http://127.0.0.1:PORT).
	Issuer string
	// ClientID and ClientSecret are the registered confidential client.
	ClientID, ClientSecret string
	// Username signs in with Password.
	Username string

	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a provider for tb whose one client may redirect to redirectURIs, and stops it
// when tb ends.
func Start(tb testing.TB, redirectURIs ...string) *Provider {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatalf("oidctest: %v", err)
	}
	addr := FreeAddr(tb)
	p := &Provider{Issuer: "http://" + addr, ClientID: "sshapi-ui", ClientSecret: randomHex(16), Username: "test-user@127.0.0.1",
		done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-addr", addr, "-issuer", p.Issuer)
	// The client secret goes by environment, not argv, where any local user could read it.
	p.cmd.Env = append(os.Environ(), "OIDCOP_CLIENT_ID="+p.ClientID, "OIDCOP_CLIENT_SECRET="+p.ClientSecret,
		"OIDCOP_REDIRECT_URIS="+strings.Join(redirectURIs, " "))
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	p.cmd.Stderr = &lockedWriter{w: &stderr}
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("oidctest: start: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("unexpected output %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case err := <-ready:
		if err != nil {
			tb.Fatalf("oidctest: %v: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		tb.Fatalf("oidctest: provider not ready after 30 s")
	}
	res, err := http.Get(p.Issuer + "/.well-known/openid-configuration")
	if err != nil {
		tb.Fatalf("oidctest: discovery: %v", err)
	}
	res.Body.Close()
	return p
}

// FreeAddr returns a loopback address with a port that was free a moment ago (for a server
// whose URL must be known before it starts, as a redirect URI must).
func FreeAddr(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Binary returns the provider's binary, built from tools/oidcop into build/bin/oidcop when it is
// missing or older than that module's go.mod or main.go ($SSHAPI_OIDCOP overrides).
func Binary() (string, error) {
	return toolbin.Binary("oidcop", "SSHAPI_OIDCOP", ".", "go.mod", "main.go")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
