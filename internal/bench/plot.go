package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// nines maps a percentile to the plot's x axis: 90 → 1, 99 → 2, 99.9 → 3; the maximum sits
// half a step beyond 99.99.
func nines(q float64) float64 {
	if q >= 100 {
		return 4.5
	}
	return -math.Log10(1 - q/100)
}

var percentileTicks = plot.ConstantTicks{
	{Value: nines(0), Label: "0"}, {Value: nines(50), Label: "50"}, {Value: nines(90), Label: "90"},
	{Value: nines(99), Label: "99"}, {Value: nines(99.9), Label: "99.9"}, {Value: nines(99.99), Label: "99.99"},
	{Value: nines(100), Label: "max"},
}

// Slug makes a file-name-safe word of s ("ls /tmp/x" → "ls-tmp-x").
func Slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimRight(b.String(), "-")
	if len(out) > 40 {
		out = out[:40]
	}
	if out == "" {
		out = "command"
	}
	return out
}

// WritePlots draws the report's figures as PNG files in dir and returns their names:
// fig1-<command>.png, latency percentile curves per offered rate, one panel per target (the
// study's Figure 1); and fig2-mean-latency.png, mean latency per offered rate, one panel per
// command, one line per target (its Figure 2).
func WritePlots(r *Report, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot dir: %w", err)
	}
	var names []string
	targets := r.Targets()
	for _, cmd := range r.Commands() {
		var plots []*plot.Plot
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, t := range targets {
			p := plot.New()
			p.Title.Text = t
			p.X.Label.Text = "percentile"
			p.Y.Label.Text = "latency (ms)"
			p.X.Tick.Marker = percentileTicks
			p.X.Min, p.X.Max = 0, nines(100)
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
			p.Legend.Top, p.Legend.Left = true, true
			any := false
			for i, rate := range r.Rates(cmd) {
				s, ok := r.Find(ScenarioCommands, t, cmd, rate)
				if !ok || len(s.Curve) == 0 {
					continue
				}
				xys := make(plotter.XYs, 0, len(s.Curve))
				for _, pt := range s.Curve {
					v, ok := logValue(pt.Ms)
					if !ok || math.IsNaN(pt.Percentile) {
						continue
					}
					xys = append(xys, plotter.XY{X: nines(pt.Percentile), Y: v})
					lo, hi = min(lo, v), max(hi, v)
				}
				if len(xys) == 0 {
					continue
				}
				l, pts, err := plotter.NewLinePoints(xys)
				if err != nil {
					return nil, fmt.Errorf("plot: %w", err)
				}
				l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
				pts.Shape = plotutil.Shape(i)
				label := fmt.Sprintf("%g/s", rate)
				if s.Failed > 0 {
					label += fmt.Sprintf(" (%d failed)", s.Failed)
				}
				p.Add(l, pts)
				p.Legend.Add(label, l, pts)
				any = true
			}
			if any {
				plots = append(plots, p)
			}
		}
		if len(plots) == 0 {
			continue
		}
		for _, p := range plots {
			setLogRange(p, lo, hi)
		}
		name := "fig1-" + Slug(cmd) + ".png"
		title := fmt.Sprintf("Latency percentiles per offered rate: %s (from scheduled send; successful requests)", cmd)
		if err := saveTiles(filepath.Join(dir, name), title, plots); err != nil {
			return nil, err
		}
		names = append(names, name)
	}

	var plots []*plot.Plot
	for _, cmd := range r.Commands() {
		p := plot.New()
		p.Title.Text = cmd
		p.X.Label.Text = "offered rate (requests/s)"
		p.Y.Label.Text = "mean latency (ms)"
		// Rates sit at equal steps (10, 50, 90, 100 and 500 are unreadable on any numeric axis).
		rates := r.Rates(cmd)
		p.Y.Scale = plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = rateTicks(rates), plot.LogTicks{Prec: -1}
		p.X.Min, p.X.Max = -0.3, float64(len(rates))-0.7
		p.Legend.Top, p.Legend.Left = true, true
		lo, hi := math.Inf(1), math.Inf(-1)
		for i, t := range targets {
			var xys plotter.XYs
			for j, rate := range rates {
				if s, ok := r.Find(ScenarioCommands, t, cmd, rate); ok && s.OK > 0 {
					if v, ok := logValue(s.Latency.Mean); ok {
						xys = append(xys, plotter.XY{X: float64(j), Y: v})
						lo, hi = min(lo, v), max(hi, v)
					}
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("plot: %w", err)
			}
			l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
			pts.Shape = plotutil.Shape(i)
			p.Add(l, pts)
			p.Legend.Add(t, l, pts)
		}
		if lo > hi { // no target had a successful request: nothing to draw
			continue
		}
		setLogRange(p, lo, hi)
		plots = append(plots, p)
	}
	if len(plots) > 0 {
		name := "fig2-mean-latency.png"
		if err := saveTiles(filepath.Join(dir, name), "Mean latency per offered rate and command (successful requests)", plots); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// logValue is latency ms as a log axis can draw it: at least 0.01 ms (a zero would be minus
// infinity); ok is false for NaN and infinities, which have no place on the axis.
func logValue(ms float64) (v float64, ok bool) {
	if math.IsNaN(ms) || math.IsInf(ms, 0) {
		return 0, false
	}
	return max(ms, 0.01), true
}

// setLogRange sets p's log y axis around the values lo..hi (both positive) with a margin, so
// the axis has a positive span even when lo == hi. Left to itself, gonum/plot widens an empty
// range to Min-1..Max+1, which is below zero for values under 1 ms, and LogTicks panics
// ("Values must be greater than 0 for a log scale").
func setLogRange(p *plot.Plot, lo, hi float64) {
	p.Y.Min, p.Y.Max = lo/1.2, hi*1.5
}

// rateTicks labels positions 0, 1, ... with the rates.
func rateTicks(rates []float64) plot.ConstantTicks {
	var ts plot.ConstantTicks
	for i, r := range rates {
		ts = append(ts, plot.Tick{Value: float64(i), Label: fmt.Sprintf("%g", r)})
	}
	return ts
}

// saveTiles lays plots out in a grid of up to 3 columns under a title and writes a PNG.
func saveTiles(path, title string, plots []*plot.Plot) error {
	cols := min(len(plots), 3)
	rows := (len(plots) + cols - 1) / cols
	const tileW, tileH = 11 * vg.Centimeter, 9 * vg.Centimeter
	titleH := vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(tileW*vg.Length(cols), tileH*vg.Length(rows)+titleH), vgimg.UseDPI(110))
	dc := draw.New(img)
	tp := plot.New()
	tp.Title.Text = title
	tp.HideAxes()
	tp.Draw(draw.Crop(dc, 0, 0, tileH*vg.Length(rows), 0))
	grid := make([][]*plot.Plot, rows)
	for j := range rows {
		grid[j] = make([]*plot.Plot, cols)
		for i := range cols {
			if k := j*cols + i; k < len(plots) {
				grid[j][i] = plots[k]
			}
		}
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 2,
		PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(grid, tiles, draw.Crop(dc, 0, 0, 0, -titleH))
	for j := range rows {
		for i := range cols {
			if grid[j][i] != nil {
				grid[j][i].Draw(canvases[j][i])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close plot %s: %w", path, err)
	}
	return nil
}
