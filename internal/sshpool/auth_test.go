package sshpool

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// userauthRequest matches sshd's DEBUG1 line for each authentication request it receives.
var userauthRequest = regexp.MustCompile(`userauth-request for user \S+ service ssh-connection method (\S+)`)

// endOfLogin matches sshd's line for a completed login or a connection closed before it.
var endOfLogin = regexp.MustCompile(`Accepted \S+ for .*|Connection closed by authenticating user|Disconnected from authenticating user|Connection reset by authenticating user`)

// authMethodsLogged are the methods of the authentication requests srv logged, in order.
func authMethodsLogged(srv *sshtest.Server) []string {
	var ms []string
	for _, m := range userauthRequest.FindAllStringSubmatch(srv.Log(), -1) {
		ms = append(ms, m[1])
	}
	return ms
}

// TestDialAuthRequests: against a stock OpenSSH sshd, a login with the pool's single key is one
// signed publickey request (the patched x/crypto skips the "none" probe and the unsigned query,
// see third_party/README.md), and the cases that patch must not break still log in or fail as
// they should: a refused key, and AuthenticationMethods lists of several steps in either order
// (the key first, or a password first, after which the key is still tried).
func TestDialAuthRequests(t *testing.T) {
	const user, pw = "sshapi-authtest", "Corr3ct-h0rse-battery"
	ctx := context.Background()
	if _, err := sshtest.EnsureUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	if err := sshtest.SetPassword(ctx, user, pw); err != nil {
		t.Fatal(err)
	}
	otherKey, err := sshtest.NewPrivateKey("ed25519", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ssh.NewSignerFromSigner(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		extra    string // appended to sshd_config
		password bool   // the client also offers the password
		refused  bool   // the client's key is not authorized
		want     []string
		wantErr  error
	}{
		{name: "one key", want: []string{"publickey"}},
		{name: "refused key", refused: true, want: []string{"publickey"}, wantErr: ErrAuth},
		{name: "refused key, then the password", refused: true, password: true,
			extra: "Match User " + user + "\n  PasswordAuthentication yes\n",
			want:  []string{"publickey", "password"}},
		{name: "AuthenticationMethods publickey,password", password: true,
			extra: "Match User " + user + "\n  PasswordAuthentication yes\n  AuthenticationMethods publickey,password\n",
			want:  []string{"publickey", "password"}},
		{name: "AuthenticationMethods password,publickey", password: true,
			extra: "Match User " + user + "\n  PasswordAuthentication yes\n  AuthenticationMethods password,publickey\n",
			want:  []string{"publickey", "none", "password", "publickey"}},
		{name: "AuthenticationMethods publickey,password without a password", password: false,
			extra: "Match User " + user + "\n  PasswordAuthentication yes\n  AuthenticationMethods publickey,password\n",
			want:  []string{"publickey"}, wantErr: ErrAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sshtest.New(t, sshtest.Options{User: user, LogLevel: "DEBUG1", ExtraConfig: tt.extra})
			cfg := srv.ClientConfig()
			if tt.refused {
				cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(other)}
			}
			if tt.password {
				cfg.Auth = append(cfg.Auth, ssh.Password(pw))
			}
			cl, err := Dial(ctx, Target{Key: Key{System: "s", User: user}, Addr: srv.Addr, Config: cfg}, 20*time.Second)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("dial: got %v, want %v", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("dial: %v\n%s", err, srv.Log())
			} else {
				cl.Close()
			}
			// sshd's preauth process logs through its monitor: wait for the line that ends the
			// login (the last one of a success, or the close of a failed one).
			srv.WaitLog(t, endOfLogin)
			if got := authMethodsLogged(srv); !slices.Equal(got, tt.want) {
				t.Errorf("authentication requests: got %q, want %q", got, tt.want)
			}
		})
	}
}
