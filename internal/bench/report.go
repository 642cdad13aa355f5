package bench

import (
	"encoding/json"
	"fmt"
	"github.com/sshapi/sshapi/internal/openloop"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Scenario names.
const (
	ScenarioCommands = "commands"
	ScenarioBurst    = "burst"
	ScenarioSessions = "sessions"
	ScenarioLoad     = openloop.ScenarioLoad
)

// BaselineTarget is the target every other one is compared with.
const BaselineTarget = "sshapi"

// Meta says where and how a report was measured.
type Meta struct {
	Started  time.Time                    `json:"started"`
	Machine  string                       `json:"machine"`
	CPUs     int                          `json:"cpus"`
	Kernel   string                       `json:"kernel,omitempty"`
	Go       string                       `json:"go"`
	OpenSSH  string                       `json:"openssh,omitempty"`
	SSHD     string                       `json:"sshd_settings,omitempty"`
	Runs     int                          `json:"runs_per_point"`
	Versions map[string]map[string]string `json:"peer_versions,omitempty"`
	Notes    []string                     `json:"notes,omitempty"`
}

// Report is everything one bench invocation measured.
type Report struct {
	Meta Meta      `json:"meta"`
	Runs []Summary `json:"runs"`
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	return writeJSON(path, r)
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode report %s: %w", path, err)
	}
	return &r, nil
}

// Targets lists the report's targets in first-seen order, the baseline first.
func (r *Report) Targets() []string {
	var out []string
	for _, s := range r.Runs {
		if !slices.Contains(out, s.Target) {
			out = append(out, s.Target)
		}
	}
	if i := slices.Index(out, BaselineTarget); i > 0 {
		out = append([]string{BaselineTarget}, slices.Delete(out, i, i+1)...)
	}
	return out
}

// Commands lists the commands of the report's command runs in first-seen order.
func (r *Report) Commands() []string {
	var out []string
	for _, s := range r.Runs {
		if s.Scenario == ScenarioCommands && !slices.Contains(out, s.Command) {
			out = append(out, s.Command)
		}
	}
	return out
}

// Rates lists the offered rates of command runs of command, ascending.
func (r *Report) Rates(command string) []float64 {
	var out []float64
	for _, s := range r.Runs {
		if s.Scenario == ScenarioCommands && s.Command == command && !slices.Contains(out, s.Rate) {
			out = append(out, s.Rate)
		}
	}
	slices.Sort(out)
	return out
}

// Find returns the run of target in scenario for command at rate, if any.
func (r *Report) Find(scenario, target, command string, rate float64) (Summary, bool) {
	for _, s := range r.Runs {
		if s.Scenario == scenario && s.Target == target && s.Command == command && s.Rate == rate {
			return s, true
		}
	}
	return Summary{}, false
}

// WriteMarkdown writes the report's tables: per command and rate every target with its
// latency percentiles, errors and ratios to sshapi; then bursts and sessions.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	targets := r.Targets()
	for _, cmd := range r.Commands() {
		fmt.Fprintf(&b, "#### `%s`: open loop, latency from the scheduled send time (ms)\n\n", cmd)
		b.WriteString("| offered/s | target | achieved/s | p50 | p90 | p99 | p99.9 | max | failed | errors | p50 ÷ sshapi | p99 ÷ sshapi |\n")
		b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
		for _, rate := range r.Rates(cmd) {
			base, hasBase := r.Find(ScenarioCommands, BaselineTarget, cmd, rate)
			for _, t := range targets {
				s, ok := r.Find(ScenarioCommands, t, cmd, rate)
				if !ok {
					continue
				}
				fmt.Fprintf(&b, "| %g | %s | %.1f | %s | %s | %s | %s | %s | %d/%d | %s | %s | %s |\n",
					rate, t, s.AchievedRate, ms(s.Latency.P50, s.OK), ms(s.Latency.P90, s.OK), ms(s.Latency.P99, s.OK),
					ms(s.Latency.P999, s.OK), ms(s.Latency.Max, s.OK), s.Failed, s.Scheduled, errorList(s),
					ratio(s.Latency.P50, base.Latency.P50, hasBase && s.OK > 0 && base.OK > 0),
					ratio(s.Latency.P99, base.Latency.P99, hasBase && s.OK > 0 && base.OK > 0))
			}
		}
		b.WriteString("\n")
	}
	for _, sc := range []struct{ name, title string }{
		{ScenarioBurst, "Burst: n requests sent at the same instant"},
		{ScenarioSessions, "Sessions: n fresh SSH connections (TCP + key exchange + public-key authentication) at once"},
	} {
		var runs []Summary
		for _, t := range targets {
			for _, s := range r.Runs {
				if s.Scenario == sc.name && s.Target == t {
					runs = append(runs, s)
				}
			}
		}
		if len(runs) == 0 {
			continue
		}
		var base Summary
		hasBase := false
		for _, s := range runs {
			if s.Target == BaselineTarget {
				base, hasBase = s, true
			}
		}
		fmt.Fprintf(&b, "#### %s\n\n", sc.title)
		b.WriteString("| target | n | ok | failed | time to all done (s) | p50 | p99 | max | errors | time ÷ sshapi |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
		for _, s := range runs {
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %.2f | %s | %s | %s | %s | %s |\n", s.Target, s.Scheduled, s.OK, s.Failed, s.WallS,
				ms(s.Latency.P50, s.OK), ms(s.Latency.P99, s.OK), ms(s.Latency.Max, s.OK), errorList(s),
				ratio(s.WallS, base.WallS, hasBase && base.WallS > 0))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(v float64, n int) string {
	if n == 0 {
		return "–"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func ratio(v, base float64, ok bool) string {
	if !ok || base <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v/base)
}

func errorList(s Summary) string {
	if len(s.Errors) == 0 {
		return "–"
	}
	var parts []string
	for _, k := range s.ErrorKinds() {
		parts = append(parts, fmt.Sprintf("%s: %d", k, s.Errors[k]))
	}
	return strings.Join(parts, "; ")
}

// bestPeer returns the peer run to compare with at (command, rate): among peers whose runs
// had no failures, the one with the lowest p99; if every peer failed some requests, the one
// with the fewest failures.
func (r *Report) bestPeer(command string, rate float64) (Summary, bool) {
	var best Summary
	found := false
	for _, t := range r.Targets() {
		if t == BaselineTarget {
			continue
		}
		s, ok := r.Find(ScenarioCommands, t, command, rate)
		if !ok {
			continue
		}
		better := !found || s.Failed < best.Failed || (s.Failed == best.Failed && s.OK > 0 && (best.OK == 0 || s.Latency.P99 < best.Latency.P99))
		if better {
			best, found = s, true
		}
	}
	return best, found
}

// WriteHeadline writes one table per command: at each rate sshapi beside the best peer (fewest
// failures, then lowest p99) and the ratio of their p99 latencies.
func (r *Report) WriteHeadline(w io.Writer) error {
	var b strings.Builder
	for _, cmd := range r.Commands() {
		fmt.Fprintf(&b, "#### `%s`: sshapi and the best peer\n\n", cmd)
		b.WriteString("| offered/s | sshapi achieved/s | sshapi p50 | sshapi p99 | sshapi failed | best peer | peer achieved/s | peer p50 | peer p99 | peer failed | peer p99 ÷ sshapi p99 |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
		for _, rate := range r.Rates(cmd) {
			s, ok := r.Find(ScenarioCommands, BaselineTarget, cmd, rate)
			if !ok {
				continue
			}
			p, pok := r.bestPeer(cmd, rate)
			if !pok {
				fmt.Fprintf(&b, "| %g | %.1f | %s | %s | %d/%d | – | – | – | – | – | – |\n", rate, s.AchievedRate,
					ms(s.Latency.P50, s.OK), ms(s.Latency.P99, s.OK), s.Failed, s.Scheduled)
				continue
			}
			fmt.Fprintf(&b, "| %g | %.1f | %s | %s | %d/%d | %s | %.1f | %s | %s | %d/%d | %s |\n", rate, s.AchievedRate,
				ms(s.Latency.P50, s.OK), ms(s.Latency.P99, s.OK), s.Failed, s.Scheduled, p.Target, p.AchievedRate,
				ms(p.Latency.P50, p.OK), ms(p.Latency.P99, p.OK), p.Failed, p.Scheduled,
				ratio(p.Latency.P99, s.Latency.P99, s.OK > 0 && p.OK > 0))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
