package soak

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Point is one request on the timeline: seconds since the load began, latency, whether it
// succeeded.
type Point struct {
	T  float64 `json:"t_s"`
	Ms float64 `json:"ms"`
	Op string  `json:"op"`
	OK bool    `json:"ok"`
}

// WritePlots writes soak-latency.png (every request's latency over time, failures in red, fault
// windows shaded), soak-memory.png, soak-goroutines.png and soak-open-files.png (each
// instance's over time) and soak-db-connections.png into dir, in the style of the bench's plots.
func (rep *Report) WritePlots(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot dir: %w", err)
	}
	var names []string
	// Latency over time.
	p := plot.New()
	p.Title.Text = "soak: request latency over time (fault windows shaded)"
	p.X.Label.Text = "time since the load began (s)"
	p.Y.Label.Text = "latency (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var ok, bad plotter.XYs
	lo, hi := 1e9, 0.0
	for _, pt := range rep.Timeline {
		v := max(pt.Ms, 0.1)
		lo, hi = min(lo, v), max(hi, v)
		if pt.OK {
			ok = append(ok, plotter.XY{X: pt.T, Y: v})
		} else {
			bad = append(bad, plotter.XY{X: pt.T, Y: v})
		}
	}
	if len(ok)+len(bad) == 0 {
		return nil, nil
	}
	p.Y.Min, p.Y.Max = lo/1.2, hi*1.5
	for i, w := range rep.Windows {
		s, e := w.Start.Sub(rep.LoadStart).Seconds(), w.End.Sub(rep.LoadStart).Seconds()
		poly, err := plotter.NewPolygon(plotter.XYs{{X: s, Y: p.Y.Min}, {X: e, Y: p.Y.Min}, {X: e, Y: p.Y.Max}, {X: s, Y: p.Y.Max}})
		if err != nil {
			return nil, err
		}
		poly.Color = color.NRGBA{R: 255, G: 200, B: 0, A: 60}
		poly.LineStyle.Width = 0
		p.Add(poly)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: s, Y: p.Y.Max / []float64{1.3, 2.6, 5.2}[i%3]}}, Labels: []string{w.Name}})
		if err == nil {
			p.Add(lbl)
		}
	}
	for i, set := range []plotter.XYs{ok, bad} {
		if len(set) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(set)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Radius = vg.Points(1.5)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		label := "ok"
		sc.GlyphStyle.Color = color.NRGBA{R: 31, G: 119, B: 180, A: 255}
		if i == 1 {
			label, sc.GlyphStyle.Color = "failed", color.NRGBA{R: 220, A: 255}
		}
		p.Add(sc)
		p.Legend.Add(fmt.Sprintf("%s (%d)", label, len(set)), sc)
	}
	p.Legend.Top = false // the window labels are at the top
	name := filepath.Join(dir, "soak-latency.png")
	if err := p.Save(22*vg.Centimeter, 11*vg.Centimeter, name); err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	names = append(names, name)
	// Per instance over time: memory, goroutines, open files; and the database's connections.
	series := func(v func(Sample) (float64, bool)) map[string]plotter.XYs {
		by := map[string]plotter.XYs{}
		for _, s := range rep.Samples {
			if y, ok := v(s); ok {
				by[s.Instance] = append(by[s.Instance], plotter.XY{X: s.T, Y: y})
			}
		}
		return by
	}
	db := map[string]plotter.XYs{}
	for _, s := range rep.DBSamples {
		if s.Connections >= 0 {
			db["connections to the soak database"] = append(db["connections to the soak database"], plotter.XY{X: s.T, Y: float64(s.Connections)})
		}
	}
	for _, lp := range []struct {
		file, title, y string
		by             map[string]plotter.XYs
	}{
		{"soak-memory.png", "soak: instance RSS (from /proc; a new process after each restart)", "RSS (MiB)",
			series(func(s Sample) (float64, bool) { return mib(s.RSSBytes), true })},
		{"soak-goroutines.png", "soak: instance goroutines (go_goroutines from /metrics)", "goroutines",
			series(func(s Sample) (float64, bool) { return float64(s.Goroutines), s.Goroutines >= 0 })},
		{"soak-open-files.png", "soak: instance open file descriptors (from /proc)", "open files",
			series(func(s Sample) (float64, bool) { return float64(s.OpenFiles), s.OpenFiles > 0 })},
		{"soak-db-connections.png", "soak: connections to the database on the primary (pg_stat_activity)", "connections", db},
	} {
		if len(lp.by) == 0 {
			continue
		}
		name := filepath.Join(dir, lp.file)
		if err := linePlot(lp.title, lp.y, lp.by, name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// linePlot draws one line per series over the load's time into path.
func linePlot(title, ylabel string, by map[string]plotter.XYs, path string) error {
	m := plot.New()
	m.Title.Text = title
	m.X.Label.Text = "time since the load began (s)"
	m.Y.Label.Text = ylabel
	m.Y.Min = 0
	for i, n := range sortedKeys(by) {
		l, pts, err := plotter.NewLinePoints(by[n])
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		l.Color, pts.Color, pts.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		pts.Radius = vg.Points(1.5)
		m.Add(l, pts)
		m.Legend.Add(n, l, pts)
	}
	m.Legend.Top, m.Legend.Left = true, true
	if err := m.Save(22*vg.Centimeter, 9*vg.Centimeter, path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
