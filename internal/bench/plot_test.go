package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWritePlotsDegenerate draws reports whose latency axes would have no span (one point, every
// point the same value, latencies clamped to the axis floor) and expects PNGs, not a panic.
func TestWritePlotsDegenerate(t *testing.T) {
	flat := func(ms float64) []Point {
		return []Point{{Percentile: 0, Ms: ms}, {Percentile: 50, Ms: ms}, {Percentile: 99, Ms: ms}, {Percentile: 100, Ms: ms}}
	}
	run := func(target string, rate, mean float64, curve []Point) Summary {
		return Summary{Target: target, Scenario: ScenarioCommands, Command: "uptime", Rate: rate, Scheduled: 10, OK: 10,
			Latency: Stats{Mean: mean, P50: mean, Max: mean}, Curve: curve, Errors: map[string]int{}}
	}
	for _, tc := range []struct {
		name string
		runs []Summary
		want string
	}{
		{"one point", []Summary{run(BaselineTarget, 10, 5, []Point{{Percentile: 100, Ms: 5}})}, "fig1-uptime.png,fig2-mean-latency.png"},
		{"one point below 1 ms", []Summary{run(BaselineTarget, 10, 0.4, []Point{{Percentile: 100, Ms: 0.4}})}, "fig1-uptime.png,fig2-mean-latency.png"},
		{"flat below 1 ms over rates", []Summary{run(BaselineTarget, 10, 0.3, flat(0.3)), run(BaselineTarget, 50, 0.3, flat(0.3))}, "fig1-uptime.png,fig2-mean-latency.png"},
		{"flat curve", []Summary{run(BaselineTarget, 10, 5, flat(5))}, "fig1-uptime.png,fig2-mean-latency.png"},
		{"flat over targets and rates", []Summary{run(BaselineTarget, 10, 5, flat(5)), run("openssh", 10, 5, flat(5)),
			run(BaselineTarget, 50, 5, flat(5)), run("openssh", 50, 5, flat(5))}, "fig1-uptime.png,fig2-mean-latency.png"},
		{"zero latency", []Summary{run(BaselineTarget, 10, 0, flat(0))}, "fig1-uptime.png,fig2-mean-latency.png"},
		{"every request failed", []Summary{{Target: BaselineTarget, Scenario: ScenarioCommands, Command: "uptime", Rate: 10, Scheduled: 10, Failed: 10,
			Errors: map[string]int{"timeout": 10}}}, ""},
		{"one failed command beside a flat one", []Summary{run(BaselineTarget, 10, 0.5, flat(0.5)),
			{Target: BaselineTarget, Scenario: ScenarioCommands, Command: "ls", Rate: 10, Scheduled: 10, Failed: 10, Errors: map[string]int{"timeout": 10}}},
			"fig1-uptime.png,fig2-mean-latency.png"},
		{"one rate one target mean only", []Summary{run(BaselineTarget, 10, 7, nil)}, "fig2-mean-latency.png"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			names, err := WritePlots(&Report{Runs: tc.runs}, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(names, ","); got != tc.want {
				t.Fatalf("plots %q, want %q", got, tc.want)
			}
			for _, n := range names {
				b, err := os.ReadFile(filepath.Join(dir, n))
				if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
					t.Errorf("%s is not a PNG (%v)", n, err)
				}
			}
		})
	}
}
