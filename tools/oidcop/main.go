// Command oidcop is the OpenID Connect provider the web interface's tests sign in with: the
// example OP of github.com/zitadel/oidc (a real provider: discovery, authorization code flow
// with PKCE, signed ID tokens, its own username and password form), in a module of its own so
// its dependencies stay out of sshapi's go.mod. internal/oidctest builds and starts it.
//
// It listens on -addr, serves the issuer -issuer and registers one confidential web client
// whose id, secret and redirect URIs come from the environment (OIDCOP_CLIENT_ID,
// OIDCOP_CLIENT_SECRET, OIDCOP_REDIRECT_URIS separated by spaces), so the secret is not in argv.
// The example's users sign in as "test-user@<issuer host>" with the password "verysecure"
// (subject "id1"). It prints "ready" on stdout once it accepts connections.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "oidcop:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	issuer := flag.String("issuer", "", "issuer URL (http://127.0.0.1:PORT)")
	flag.Parse()
	id, secret := os.Getenv("OIDCOP_CLIENT_ID"), os.Getenv("OIDCOP_CLIENT_SECRET")
	redirects := strings.Fields(os.Getenv("OIDCOP_REDIRECT_URIS"))
	if *issuer == "" || id == "" || secret == "" || len(redirects) == 0 {
		return errors.New("need -issuer and OIDCOP_CLIENT_ID, OIDCOP_CLIENT_SECRET, OIDCOP_REDIRECT_URIS")
	}
	storage.RegisterClients(storage.WebClient(id, secret, redirects...))
	st := storage.NewStorage(storage.NewUserStore(*issuer))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	router := exampleop.SetupServer(*issuer, st, log, false)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}
