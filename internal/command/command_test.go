package command

import (
	"context"
	"encoding/base64"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
)

func setup(t *testing.T) (*sshpool.Pool, sshpool.Target, *sshtest.Server) {
	t.Helper()
	return setupWith(t, sshtest.Options{})
}

// setupWith starts an sshd with o and a pool, and returns the pool, a target on that sshd and
// the server.
func setupWith(t *testing.T, o sshtest.Options) (*sshpool.Pool, sshpool.Target, *sshtest.Server) {
	t.Helper()
	srv := sshtest.New(t, o)
	p := sshpool.New(sshpool.Config{}, nil, nil)
	_ = p.Start(t.Context())
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	cfg := &ssh.ClientConfig{User: srv.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(srv.Signer)}}
	if err := (sshpool.HostKeyPolicy{Keys: []string{srv.AuthorizedHostKey()}}).Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return p, sshpool.Target{
		Key:    sshpool.Key{System: "cmd", User: srv.User, Credential: "k"},
		Addr:   srv.Addr,
		Config: cfg,
	}, srv
}

func TestRun(t *testing.T) {
	p, tg, _ := setup(t)
	intp := func(i int) *int { return &i }
	tests := []struct {
		name string
		req  Request
		want Result
	}{
		{"exit zero", Request{Command: "echo hello; echo oops >&2"}, Result{ExitStatus: intp(0), Stdout: "hello\n", Stderr: "oops\n"}},
		{"non-zero exit is a result", Request{Command: "exit 3"}, Result{ExitStatus: intp(3)}},
		{"stdin", Request{Command: "tr a-z A-Z", Stdin: []byte("shout")}, Result{ExitStatus: intp(0), Stdout: "SHOUT"}},
		{"non-UTF-8 output comes base64", Request{Command: `printf '\377\376ok'`}, Result{ExitStatus: intp(0), Stdout: base64.StdEncoding.EncodeToString([]byte("\xff\xfeok")), StdoutEncoding: "base64"}},
		{"UTF-8 output stays text", Request{Command: `printf 'h\303\251'`}, Result{ExitStatus: intp(0), Stdout: "hé"}},
		{"output capped, command not blocked", Request{Command: "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2", MaxOutput: 10}, Result{ExitStatus: intp(0), Stdout: "aaaaaaaaaa", StdoutTruncated: true, Stderr: "done\n"}},
		{"cap does not split a character", Request{Command: `printf 'aé'`, MaxOutput: 2}, Result{ExitStatus: intp(0), Stdout: "a", StdoutTruncated: true}},
		{"killed by signal", Request{Command: "kill -TERM $$"}, Result{Signal: "TERM"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Run(t.Context(), p, tg, tc.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			got.DurationMS = 0
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got %+v (exit %v), want %+v", *got, deref(got.ExitStatus), tc.want)
			}
		})
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestTimeoutKillsRemoteProcess checks that a timed-out command leaves nothing running on the
// server, including children of the shell (FirecREST left them running).
func TestTimeoutKillsRemoteProcess(t *testing.T) {
	p, tg, srv := setup(t)
	marker := fmt.Sprintf("%d", time.Now().UnixNano()%100000+100000)
	start := time.Now()
	// The sleep is a child of the shell, not exec'd by it.
	res, err := Run(t.Context(), p, tg, Request{Command: "sleep " + marker + "; echo never", Timeout: 500 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut {
		t.Fatalf("timed_out not set: %+v", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s", d)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		out, _ := exec.Command("pgrep", "-u", srv.User, "-f", "sleep "+marker).Output()
		if len(strings.TrimSpace(string(out))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote sleep still running after timeout: pids %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStreaming(t *testing.T) {
	p, tg, _ := setup(t)
	var events []Event
	var times []time.Time
	res, err := Run(t.Context(), p, tg, Request{Command: "echo one; sleep 0.3; printf '\\377'; echo two >&2; exit 4"}, func(e Event) {
		events = append(events, e)
		times = append(times, time.Now())
	})
	if err != nil {
		t.Fatal(err)
	}
	if *res.ExitStatus != 4 {
		t.Fatalf("exit = %d", *res.ExitStatus)
	}
	var out, errs strings.Builder
	for _, e := range events {
		switch e.Type {
		case "stdout":
			if e.Encoding == "base64" {
				b, _ := base64.StdEncoding.DecodeString(e.Data)
				out.Write(b)
			} else {
				out.WriteString(e.Data)
			}
		case "stderr":
			errs.WriteString(e.Data)
		}
	}
	if out.String() != "one\n\xff" || errs.String() != "two\n" {
		t.Fatalf("streamed stdout %q stderr %q", out.String(), errs.String())
	}
	last := events[len(events)-1]
	if last.Type != "exit" || *last.Result.ExitStatus != 4 {
		t.Fatalf("last event %+v", last)
	}
	if events[0].Data != "one\n" || times[len(times)-1].Sub(times[0]) < 250*time.Millisecond {
		t.Fatalf("first chunk did not arrive before the command finished: %+v", events)
	}
}
