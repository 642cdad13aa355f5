package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
)

// Paths lists the report's network paths in first-seen order.
func (r *TransferReport) Paths() []string {
	var out []string
	for _, s := range r.Runs {
		if !slices.Contains(out, s.Path) {
			out = append(out, s.Path)
		}
	}
	return out
}

// peer returns the successful peer run compared with s: same path and scenario (and, for the
// connections scenario, the same n).
func (r *TransferReport) peer(s TransferRun) (TransferRun, bool) {
	for _, p := range r.Runs {
		if p.Path == s.Path && p.Scenario == s.Scenario && p.Cipher == s.Cipher && p.Target != BaselineTarget && p.Error == "" && p.MBps > 0 &&
			(s.Scenario != TransferConnections || p.Streams == s.Streams) {
			return p, true
		}
	}
	return TransferRun{}, false
}

// WriteMarkdown writes one table per path: every run with its throughput and CPU, and for
// sshapi's runs the ratio of its throughput to OpenSSH's on the same path (above 1 means sshapi
// is faster); then the connection scaling table if measured.
func (r *TransferReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	streams := func(s TransferRun) string {
		asked := "auto"
		if s.Streams > 0 {
			asked = fmt.Sprint(s.Streams)
		}
		if s.Target != BaselineTarget || s.Scenario != TransferSystem && s.Scenario != TransferConnections {
			return "1"
		}
		if s.StreamsUsed > 0 && (s.Streams == 0 || s.StreamsUsed != s.Streams) {
			return fmt.Sprintf("%s → %d", asked, s.StreamsUsed)
		}
		return asked
	}
	for _, path := range r.Paths() {
		fmt.Fprintf(&b, "#### Transfers: %s\n\n", path)
		b.WriteString("| what | target | streams | MB/s | seconds | CPU s (bench process + clients) | sshd CPU s | sshapi ÷ OpenSSH (MB/s) |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.Runs {
			if s.Path != path || s.Scenario == TransferConnections {
				continue
			}
			what := s.Scenario
			if s.Cipher != "" {
				what += " · `" + s.Cipher + "`"
			}
			b.WriteString(transferRow(r, s, what, streams(s)))
		}
		b.WriteString("\n")
		var conns []TransferRun
		for _, s := range r.Runs {
			if s.Path == path && s.Scenario == TransferConnections {
				conns = append(conns, s)
			}
		}
		if len(conns) == 0 {
			continue
		}
		fmt.Fprintf(&b, "#### Scaling: n OpenSSH `sftp get` over n connections at once vs one sshapi transfer with n streams (%s)\n\n", path)
		b.WriteString("| n | target | streams | aggregate MB/s | seconds | CPU s (bench process + clients) | sshd CPU s | sshapi ÷ OpenSSH (MB/s) |\n")
		b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range conns {
			b.WriteString(transferRow(r, s, fmt.Sprint(s.Streams), streams(s)))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func transferRow(r *TransferReport, s TransferRun, what, streams string) string {
	target := s.Target
	if s.Scenario == TransferConnections && s.Target != BaselineTarget {
		target = fmt.Sprintf("%d × %s get", s.Streams, s.Target)
	}
	mbps, ratioS := fmt.Sprintf("%.1f", s.MBps), "–"
	if s.Error != "" {
		mbps = "failed: " + truncate(strings.ReplaceAll(s.Error, "|", "/"), 80)
	} else if p, ok := r.peer(s); ok && s.Target == BaselineTarget {
		ratioS = fmt.Sprintf("%.2f×", s.MBps/p.MBps)
	}
	sshd := "–"
	if s.SSHDCPUSeconds > 0 {
		sshd = fmt.Sprintf("%.2f", s.SSHDCPUSeconds)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %.2f | %.2f | %s | %s |\n", what, target, streams, mbps, s.Seconds, s.CPUSeconds, sshd, ratioS)
}

// WritePlots draws transfer-streams.png into dir, one panel per path: sshapi's
// system-to-system MB/s per stream count used, OpenSSH scp -3's as a flat line, and the
// connection scaling (n sftp gets vs n streams) when measured. It returns the file names.
func (r *TransferReport) WritePlots(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot dir: %w", err)
	}
	var plots []*plot.Plot
	for _, path := range r.Paths() {
		p := plot.New()
		p.Title.Text = path
		p.X.Label.Text = "streams (sshapi) / connections (sftp)"
		p.Y.Label.Text = "MB/s"
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		lines := map[string]plotter.XYs{}
		order := []string{}
		add := func(name string, x, y float64) {
			if _, ok := lines[name]; !ok {
				order = append(order, name)
			}
			lines[name] = append(lines[name], plotter.XY{X: x, Y: y})
		}
		maxX := 1.0
		var scp float64
		for _, s := range r.Runs {
			if s.Path != path || s.Error != "" {
				continue
			}
			switch {
			case s.Scenario == TransferSystem && s.Target == BaselineTarget && s.StreamsUsed > 0:
				add("sshapi system-to-system", float64(s.StreamsUsed), s.MBps)
				maxX = max(maxX, float64(s.StreamsUsed))
			case s.Scenario == TransferSystem:
				scp = s.MBps
			case s.Scenario == TransferConnections && s.Target == BaselineTarget:
				add("sshapi, n streams (scaling run)", float64(s.Streams), s.MBps)
				maxX = max(maxX, float64(s.Streams))
			case s.Scenario == TransferConnections:
				add("n × sftp get, aggregate", float64(s.Streams), s.MBps)
				maxX = max(maxX, float64(s.Streams))
			}
		}
		if scp > 0 {
			order = append(order, "scp -3")
			lines["scp -3"] = plotter.XYs{{X: 1, Y: scp}, {X: maxX, Y: scp}}
		}
		if len(order) == 0 {
			continue
		}
		for i, name := range order {
			xys := lines[name]
			slices.SortFunc(xys, func(a, b plotter.XY) int {
				switch {
				case a.X < b.X:
					return -1
				case a.X > b.X:
					return 1
				}
				return 0
			})
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("plot: %w", err)
			}
			l.Color, pts.Color, pts.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
			p.Add(l, pts)
			p.Legend.Add(name, l, pts)
		}
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return nil, nil
	}
	const name = "transfer-streams.png"
	if err := saveTiles(filepath.Join(dir, name), "File transfer throughput per stream count (MB/s, higher is better)", plots); err != nil {
		return nil, err
	}
	return []string{name}, nil
}
