package bench

import (
	"cmp"
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
		if s.Target != BaselineTarget || !slices.Contains([]string{TransferSystem, TransferConnections, TransferSFTPToS3, TransferS3ToSFTP}, s.Scenario) {
			return "1"
		}
		if s.StreamsUsed > 0 && (s.Streams == 0 || s.StreamsUsed != s.Streams) {
			return fmt.Sprintf("%s → %d", asked, s.StreamsUsed)
		}
		return asked
	}
	for _, path := range r.Paths() {
		if !slices.ContainsFunc(r.Runs, func(s TransferRun) bool { return s.Path == path && !isChannels(s.Scenario) }) {
			continue
		}
		fmt.Fprintf(&b, "#### Transfers: %s\n\n", path)
		b.WriteString("| what | target | streams | MB/s | seconds | CPU s (bench process + clients) | sshd CPU s | sshapi ÷ peer (MB/s) |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.Runs {
			if s.Path != path || s.Scenario == TransferConnections || isChannels(s.Scenario) {
				continue
			}
			what := s.Scenario + digestLabel(s.Digest) + poolLabel(s.Pool)
			if s.Cipher != "" {
				what += " · `" + s.Cipher + "`"
			}
			b.WriteString(tableRow(transferCells(r, s, what, streams(s))))
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
			b.WriteString(tableRow(transferCells(r, s, fmt.Sprint(s.Streams), streams(s))))
		}
		b.WriteString("\n")
	}
	for _, path := range r.Paths() {
		r.writeChannels(&b, path)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func isChannels(scenario string) bool {
	return scenario == TransferUploadChannels || scenario == TransferDownloadChannels
}

// writeChannels writes the table of the channels scenarios on path, if any: per direction
// sshapi at each channel count, then OpenSSH sftp, with the share of the emulated link and the
// ratio to sftp.
func (r *TransferReport) writeChannels(b *strings.Builder, path string) {
	var runs []TransferRun
	for _, s := range r.Runs {
		if s.Path == path && isChannels(s.Scenario) {
			runs = append(runs, s)
		}
	}
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(b, "#### Downloads and uploads through the API per SFTP channel count: %s\n\n", path)
	b.WriteString("| what | target | channels | MB/s | % of link | seconds | CPU s (bench process + clients) | sshd CPU s | sshapi ÷ OpenSSH sftp (MB/s) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, dir := range []struct{ scenario, what string }{
		{TransferDownloadChannels, "download (GET …/content)"},
		{TransferUploadChannels, "upload (PUT …/content)"},
	} {
		for _, s := range runs {
			if s.Scenario != dir.scenario {
				continue
			}
			ch := "1"
			if s.Target == BaselineTarget {
				ch = ChannelsLabel(s.Streams)
				if s.StreamsUsed > 0 && (s.Streams == 0 || s.StreamsUsed != s.Streams) {
					ch += fmt.Sprintf(" → %d", s.StreamsUsed)
				}
			}
			share := "–"
			if s.LinkMBps > 0 && s.Error == "" {
				share = fmt.Sprintf("%.0f%%", 100*s.MBps/s.LinkMBps)
			}
			b.WriteString(tableRow(slices.Insert(transferCells(r, s, dir.what, ch), 4, share)))
		}
	}
	b.WriteString("\n")
}

// ChannelsLabel is how reports and progress name a channel count: "auto" for 0.
func ChannelsLabel(n int) string {
	if n == 0 {
		return "auto"
	}
	return fmt.Sprint(n)
}

// tableRow is one Markdown table row of cells.
func tableRow(cells []string) string { return "| " + strings.Join(cells, " | ") + " |\n" }

// transferCells are a run's cells: what, target, streams, MB/s, seconds, CPU, sshd CPU and the
// ratio to the peer (OpenSSH, or rclone for the S3 scenarios) on the same path.
func transferCells(r *TransferReport, s TransferRun, what, streams string) []string {
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
	return []string{what, target, streams, mbps, fmt.Sprintf("%.2f", s.Seconds), fmt.Sprintf("%.2f", s.CPUSeconds), sshd, ratioS}
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
		p, err := mbpsPlot(path, "streams (sshapi) / connections (sftp)", order, lines)
		if err != nil {
			return nil, err
		}
		plots = append(plots, p)
	}
	var names []string
	if len(plots) > 0 {
		const name = "transfer-streams.png"
		if err := saveTiles(filepath.Join(dir, name), "File transfer throughput per stream count (MB/s, higher is better)", plots); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	name, err := r.writeChannelPlot(dir)
	if err != nil || name == "" {
		return names, err
	}
	return append(names, name), nil
}

// writeChannelPlot draws transfer-channels.png, one panel per path with channel runs: sshapi's
// download and upload MB/s per channel count asked for, OpenSSH sftp get and put and the
// emulated link's rate as flat lines. It returns "" when there is nothing to draw.
func (r *TransferReport) writeChannelPlot(dir string) (string, error) {
	var plots []*plot.Plot
	for _, path := range r.Paths() {
		lines := map[string]plotter.XYs{}
		var order []string
		flat := map[string]float64{}
		maxX, link := 1.0, 0.0
		for _, s := range r.Runs {
			if s.Path != path || !isChannels(s.Scenario) || s.Error != "" {
				continue
			}
			dir := "download"
			if s.Scenario == TransferUploadChannels {
				dir = "upload"
			}
			link = max(link, s.LinkMBps)
			switch {
			case s.Target != BaselineTarget:
				flat["sftp "+map[string]string{"download": "get", "upload": "put"}[dir]] = s.MBps
			case s.Streams > 0:
				name := "sshapi " + dir
				if _, ok := lines[name]; !ok {
					order = append(order, name)
				}
				lines[name] = append(lines[name], plotter.XY{X: float64(s.Streams), Y: s.MBps})
				maxX = max(maxX, float64(s.Streams))
			}
		}
		if len(order) == 0 {
			continue
		}
		for _, name := range []string{"sftp get", "sftp put"} {
			if v, ok := flat[name]; ok {
				order = append(order, name)
				lines[name] = plotter.XYs{{X: 1, Y: v}, {X: maxX, Y: v}}
			}
		}
		if link > 0 {
			order = append(order, "emulated link")
			lines["emulated link"] = plotter.XYs{{X: 1, Y: link}, {X: maxX, Y: link}}
		}
		p, err := mbpsPlot(path, "SFTP channels per transfer (sshapi)", order, lines)
		if err != nil {
			return "", err
		}
		top := link
		for _, xys := range lines {
			for _, xy := range xys {
				top = max(top, xy.Y)
			}
		}
		p.Y.Max = 1.6 * top // room for the legend above the lines
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return "", nil
	}
	const name = "transfer-channels.png"
	if err := saveTiles(filepath.Join(dir, name), "API GET/PUT per SFTP channel count (MB/s)", plots); err != nil {
		return "", err
	}
	return name, nil
}

// mbpsPlot is a panel titled title of MB/s over xLabel: lines[name] for each name in order
// (points sorted by x), each in its own colour and marker, with a legend entry.
func mbpsPlot(title, xLabel string, order []string, lines map[string]plotter.XYs) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "MB/s"
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = true, true
	for i, name := range order {
		xys := lines[name]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		l.Color, pts.Color, pts.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	return p, nil
}
