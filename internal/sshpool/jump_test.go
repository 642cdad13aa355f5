package sshpool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// jumpTargets returns the pair's jump as a target with maxSessions and the target behind it.
func jumpTargets(t *testing.T, pair *sshtest.JumpPair, jumpMaxSessions int) (jump, behind Target) {
	t.Helper()
	jump = target(t, pair.Jump, "o/bastion", pair.Jump.Signer)
	jump.MaxSessions = jumpMaxSessions
	behind = target(t, pair.Target, "o/inner", pair.Target.Signer)
	behind.Jump = &jump
	return jump, behind
}

// connState is what the pool holds for key: its connections' slots, lent channels and tunnels.
type connState struct{ slots, inUse, tunnels int }

func poolState(p *Pool, key Key) []connState {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []connState
	if kp := p.keys[key]; kp != nil {
		for _, c := range kp.conns {
			out = append(out, connState{c.slots, c.inUse, c.tunnels})
		}
	}
	return out
}

// awaitPool polls the pool's state until ok holds or the test's time runs out.
func awaitPool(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJumpHostCarriesTraffic runs many concurrent commands on a target that only the jump host
// can reach. Every tunneled connection holds one of the jump connections' channel slots (here
// one per jump connection), and the slots come back when the tunneled connections go.
func TestJumpHostCarriesTraffic(t *testing.T) {
	pair := sshtest.NewJumpPair(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	jump, behind := jumpTargets(t, pair, 3) // 3-2 = one slot per jump connection

	// Not reachable without the jump host.
	if _, err := Dial(t.Context(), target(t, pair.Target, "o/direct", pair.Target.Signer), 5*time.Second); err == nil {
		t.Fatalf("the target at %s answered a direct dial; the test would prove nothing", pair.Target.Addr)
	}

	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := run(t.Context(), p, behind, "echo "+strconv.Itoa(i)+"; sleep 0.2")
			if err == nil && strings.TrimSpace(out) != strconv.Itoa(i) {
				err = fmt.Errorf("command %d printed %q", i, out)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	targets, jumps := poolState(p, behind.Key), poolState(p, jump.Key)
	tunnels := 0
	for _, j := range jumps {
		if j.tunnels+j.inUse > j.slots {
			t.Errorf("jump connection over its slots: %+v", j)
		}
		tunnels += j.tunnels
	}
	if len(targets) == 0 || tunnels != len(targets) || len(jumps) < len(targets) {
		t.Fatalf("%d target connections, %d jump connections carrying %d tunnels: want one tunnel per target connection, each on its own jump slot", len(targets), len(jumps), tunnels)
	}
	log := pair.Jump.Log()
	if want := "target 127.0.0.1 port " + strconv.Itoa(pair.Target.Port); !strings.Contains(log, want) {
		t.Fatalf("jump sshd log lacks %q:\n%s", want, log)
	}

	// Dropping the target's connections gives the jump slots back.
	p.Forget(behind.Key.System)
	for _, j := range poolState(p, jump.Key) {
		if j.tunnels != 0 {
			t.Fatalf("after Forget of the target, a jump connection still carries %d tunnels", j.tunnels)
		}
	}
	// Dropping the jump's connections ends the tunneled ones; the next command redials both.
	if _, err := run(t.Context(), p, behind, "true"); err != nil {
		t.Fatal(err)
	}
	p.Forget(jump.Key.System)
	awaitPool(t, "the tunneled connection to die with its jump connection", func() bool { return len(poolState(p, behind.Key)) == 0 })
	if out, err := run(t.Context(), p, behind, "echo again"); err != nil || strings.TrimSpace(out) != "again" {
		t.Fatalf("after the jump connection was dropped: %q, %v", out, err)
	}
}

// TestJumpHostFailuresNamed: the jump's own host key and credential failures are reported as
// such (JumpError wrapping ErrHostKey / ErrAuth), and the target's key is not blocked by them.
func TestJumpHostFailuresNamed(t *testing.T) {
	pair := sshtest.NewJumpPair(t, sshtest.Options{})
	p, _ := newPool(t, Config{})
	tests := []struct {
		name   string
		break_ func(j *Target)
		want   error
	}{
		{"jump credential refused", func(j *Target) {
			bad := target(t, pair.Jump, "o/bastion", newSigner(t))
			*j = bad
		}, ErrAuth},
		{"jump host key mismatch", func(j *Target) {
			wrong := target(t, pair.Target, "o/bastion-wrong", pair.Jump.Signer) // the target's host key
			j.Key.System = "o/bastion-wrong"
			j.Config = wrong.Config
			j.Config.Auth = target(t, pair.Jump, "x", pair.Jump.Signer).Config.Auth
		}, ErrHostKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jump, behind := jumpTargets(t, pair, 10)
			tc.break_(&jump)
			behind.Jump = &jump
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			logins := strings.Count(pair.Target.Log(), "Accepted publickey")
			_, err := run(ctx, p, behind, "true")
			var je *JumpError
			if !errors.Is(err, tc.want) || !errors.As(err, &je) || je.Jump != jump.Key {
				t.Fatalf("err = %v, want a JumpError for %s wrapping %v", err, jump.Key, tc.want)
			}
			if strings.Count(pair.Target.Log(), "Accepted publickey") != logins {
				t.Fatalf("the target saw a login although the jump hop failed")
			}
			// With a working jump the same target key works at once (no breaker on it).
			good, _ := jumpTargets(t, pair, 10)
			behind.Jump = &good
			if _, err := run(t.Context(), p, behind, "true"); err != nil {
				t.Fatalf("after fixing the jump host: %v", err)
			}
			p.Forget(behind.Key.System)
		})
	}
}

// TestNetworkPolicyRefusesDial: a policy that denies loopback refuses the test sshd at once, as a
// clear error and without a retry loop, while a jump host on an allowed address still carries
// traffic to its own loopback (the jump host dials that hop, not the service).
func TestNetworkPolicyRefusesDial(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	np, err := netpolicy.New(netpolicy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := newPoolWith(t, np)
	tg := target(t, srv, "o/local", srv.Signer)
	conns := strings.Count(srv.Log(), "Connection from")
	start := time.Now()
	_, err = run(t.Context(), reg, tg, "true")
	if !errors.Is(err, netpolicy.ErrDenied) {
		t.Fatalf("err = %v, want netpolicy.ErrDenied", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("denied dial took %s: it must fail at once, not retry", el)
	}
	if err := reg.Check(t.Context(), tg); !errors.Is(err, netpolicy.ErrDenied) {
		t.Fatalf("Check: %v, want netpolicy.ErrDenied", err)
	}
	if strings.Count(srv.Log(), "Connection from") != conns {
		t.Fatalf("a denied dial reached sshd:\n%s", srv.Log())
	}

	pair := sshtest.NewJumpPair(t, sshtest.Options{})
	_, behind := jumpTargets(t, pair, 10)
	if out, err := run(t.Context(), reg, behind, "echo ok"); err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("through a jump host on an allowed address: %q, %v", out, err)
	}
}

func newPoolWith(t *testing.T, np *netpolicy.Policy) *Pool {
	t.Helper()
	p := New(Config{}, nil, nil, WithNetworkPolicy(np))
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return p
}
