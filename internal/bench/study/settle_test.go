package study

import (
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/bench"
)

func TestParseRunnable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"0.36 6.34 7.96 2/345 1234\n", 2, true},
		{"30.35 9.41 7.83 41/1020 99", 41, true},
		{"0.00 0.00 0.00 1/80 7", 1, true},
		{"0.36 6.34 7.96", 0, false},
		{"0.36 6.34 7.96 x/345 1", 0, false},
		{"0.36 6.34 7.96 345 1", 0, false},
		{"", 0, false},
	} {
		n, ok := parseRunnable(tc.in)
		if n != tc.want || ok != tc.ok {
			t.Errorf("parseRunnable(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.want, tc.ok)
		}
	}
}

func TestSettledRuns(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs []bench.ClientsRun
		want []string // substrings of the note
		not  string
	}{
		{"all quiet", []bench.ClientsRun{{Case: "ls", Target: "sshapi", SettledS: 2.1}, {Case: "ls", Target: "asyncssh", SettledS: 4.56}},
			[]string{"waits of 2.1–4.6 s"}, "still busy"},
		{"one busy", []bench.ClientsRun{{Case: "uptime", Target: "sshapi", Round: 2, SettledS: 20, Unquiet: true}, {Case: "ls", Target: "sshapi", SettledS: 2}},
			[]string{"waits of 2.0–20.0 s", "still busy when the wait gave up: uptime sshapi round 2"}, "ls sshapi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := settledRuns(tc.runs)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("settledRuns = %q, want it to contain %q", got, w)
				}
			}
			if strings.Contains(got, tc.not) {
				t.Errorf("settledRuns = %q, want no %q", got, tc.not)
			}
		})
	}
}
