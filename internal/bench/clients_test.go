package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestListedNames: the ls client's check finds each wanted name as a "name" member's whole
// value, and only there: not as a prefix of a longer name, not inside another string, not as
// another member's value.
func TestListedNames(t *testing.T) {
	want := map[string]int{}
	for i, n := range []string{"f1", "f2", `a"b`} {
		q, _ := json.Marshal(n)
		want[string(q)] = i
	}
	for _, tc := range []struct {
		name, body string
		missing    int
	}{
		{"all", `{"entries":[{"name":"f1","size":0},{"name":"f2"},{"name":"a\"b"}]}`, -1},
		{"order does not matter", `{"entries":[{"name":"a\"b"},{"name":"f2"},{"name":"f1"}]}`, -1},
		{"one missing", `{"entries":[{"name":"f1"},{"name":"a\"b"}]}`, 1},
		{"a longer name is not the name", `{"entries":[{"name":"f10"},{"name":"f2"},{"name":"a\"b"}]}`, 0},
		{"inside another string", `{"path":"x\"name\":\"f1\"","entries":[{"name":"f2"},{"name":"a\"b"}]}`, 0},
		{"another member's value", `{"entries":[{"path":"f1"},{"name":"f2"},{"name":"a\"b"}]}`, 0},
		{"none", `{"entries":[]}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !json.Valid([]byte(tc.body)) {
				t.Fatalf("test body is not JSON: %s", tc.body)
			}
			if got := listedNames([]byte(tc.body), want); got != tc.missing {
				t.Fatalf("listedNames = %d, want %d", got, tc.missing)
			}
		})
	}
}

// TestClientsRoundsLine: over several rounds each target's rate is its successful requests over
// the seconds they took in all its runs (not the mean of its rates), its p99 the worst of its
// runs, its CPU the mean per request, and the ratios are sshapi's over each peer's; each row's
// ratio is against sshapi's run of the same round.
func TestClientsRoundsLine(t *testing.T) {
	run := func(target string, round, ok int, rate, p99, cpu float64) ClientsRun {
		return ClientsRun{Case: CaseUptime, Target: target, Request: "`uptime`", Clients: 50, Round: round, CPUMs: cpu, SSHDCPUMs: 2 * cpu,
			Summary: Summary{Scheduled: ok, OK: ok, AchievedRate: rate, Latency: Stats{P50: p99 / 2, P99: p99, Max: p99}}}
	}
	r := &ClientsReport{Runs: []ClientsRun{
		run(BaselineTarget, 1, 1000, 100, 40, 1), // 10 s
		run(PeerAsyncSSH, 1, 900, 90, 50, 2),     // 10 s
		run(PeerAsyncSSH, 2, 1100, 110, 30, 4),   // 10 s
		run(BaselineTarget, 2, 3000, 300, 20, 3), // 10 s
	}}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| target | round | request |",
		"| asyncssh | 1 | `uptime` | 900 | 0 | 90.0 |", // sshapi ÷ asyncssh in round 1: 100/90, 40/50
		"| 1.11× | 0.80× |",
		"| asyncssh | 2 | `uptime` | 1100 | 0 | 110.0 |", // round 2: 300/110, 20/30
		"| 2.73× | 0.67× |",
		// sshapi 4000 in 20 s = 200/s, worst p99 40, CPU (1000×1 + 3000×3)/4000 = 2.5;
		// asyncssh 2000 in 20 s = 100/s, worst p99 50, CPU (900×2 + 1100×4)/2000 = 3.1.
		"Over 2 rounds each: sshapi 200.0 req/s (worst p99 40.0 ms; CPU 2.50 ms + sshd 5.00 ms per request); asyncssh 100.0 req/s (worst p99 50.0 ms; CPU 3.10 ms + sshd 6.20 ms per request): sshapi ÷ asyncssh **2.00×** req/s, 0.80× worst p99.",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}
