package openloop

import (
	"maps"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// ScenarioLoad is the Scenario of a Summary from the service's own load route.
const ScenarioLoad = "load"

// Histogram range: 1 µs to 10 min at 3 significant digits (0.1% resolution).
const (
	histMin    = 1
	histMax    = int64(10 * time.Minute / time.Microsecond)
	histDigits = 3
)

// Recorder collects the outcome of every request of one run. It is safe for concurrent use.
type Recorder struct {
	mu       sync.Mutex
	start    time.Time
	last     time.Time
	latency  *hdrhistogram.Histogram // successful requests, µs from scheduled send to completion
	service  *hdrhistogram.Histogram // successful requests, µs from actual send to completion
	nSched   int
	ok       int
	failed   int
	errors   map[string]int
	examples map[string]string
}

// NewRecorder returns an empty recorder for a run that started at start.
func NewRecorder(start time.Time) *Recorder {
	return &Recorder{
		start:    start,
		latency:  hdrhistogram.New(histMin, histMax, histDigits),
		service:  hdrhistogram.New(histMin, histMax, histDigits),
		errors:   map[string]int{},
		examples: map[string]string{},
	}
}

func (r *Recorder) scheduled(n int) {
	r.mu.Lock()
	r.nSched += n
	r.mu.Unlock()
}

// Record notes one finished request: when it was scheduled, when it was actually sent (zero if
// never), when it finished and how. Latency is counted from sched.
func (r *Recorder) Record(sched, sent, done time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if done.After(r.last) {
		r.last = done
	}
	if err != nil {
		r.failed++
		k := Classify(err)
		r.errors[k]++
		if _, ok := r.examples[k]; !ok {
			r.examples[k] = Truncate(err.Error(), 300)
		}
		return
	}
	r.ok++
	_ = r.latency.RecordValue(clampUS(done.Sub(sched)))
	_ = r.service.RecordValue(clampUS(done.Sub(sent)))
}

func clampUS(d time.Duration) int64 {
	return min(max(d.Microseconds(), histMin), histMax)
}

// Truncate shortens s to at most n bytes for error details, marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (r *Recorder) progress(elapsed time.Duration) Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := r.ok + r.failed
	return Progress{Elapsed: elapsed, Scheduled: r.nSched, Done: done, InFlight: r.nSched - done, Errors: r.failed}
}

// Stats are latency statistics in milliseconds.
type Stats struct {
	Min  float64 `json:"min_ms"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p99_9_ms"`
	Max  float64 `json:"max_ms"`
}

// Point is one point of a latency percentile curve.
type Point struct {
	Percentile float64 `json:"percentile"`
	Ms         float64 `json:"ms"`
}

// Summary is the report of one run: what was offered, what was achieved, latency percentiles of
// the successful requests and failures by kind.
type Summary struct {
	// Target names what was measured ("sshapi", "openssh", ...); Scenario what it ran.
	Target   string `json:"target"`
	Scenario string `json:"scenario"`
	Command  string `json:"command,omitempty"`
	// Rate is the offered rate (requests/s; 0 for a burst), Duration the scheduling window.
	Rate      float64 `json:"offered_rate"`
	DurationS float64 `json:"duration_s"`
	// Scheduled requests, of which OK succeeded and Failed did not.
	Scheduled int `json:"scheduled"`
	OK        int `json:"ok"`
	Failed    int `json:"failed"`
	// WallS is the time from the first scheduled send to the last completion.
	WallS float64 `json:"wall_s"`
	// AchievedRate is successful requests per second of wall time.
	AchievedRate float64 `json:"achieved_rate"`
	// Latency is measured from each request's scheduled send time (coordinated-omission
	// corrected); Service from its actual send. Both cover successful requests only.
	Latency Stats `json:"latency"`
	Service Stats `json:"service_time"`
	// Curve is the latency percentile curve (Figure 1 of the study).
	Curve []Point `json:"percentiles"`
	// Errors counts failures by kind; ErrorExamples holds one message per kind.
	Errors        map[string]int    `json:"errors"`
	ErrorExamples map[string]string `json:"error_examples,omitempty"`
}

// curveQuantiles are the percentiles a Summary's Curve holds.
var curveQuantiles = []float64{0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100}

// Summary summarizes what was recorded.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Summary{
		Scheduled:     r.nSched,
		OK:            r.ok,
		Failed:        r.failed,
		Errors:        maps.Clone(r.errors),
		ErrorExamples: maps.Clone(r.examples),
		Latency:       stats(r.latency),
		Service:       stats(r.service),
	}
	if !r.last.IsZero() {
		s.WallS = r.last.Sub(r.start).Seconds()
	}
	if s.WallS > 0 {
		s.AchievedRate = float64(r.ok) / s.WallS
	}
	if r.latency.TotalCount() > 0 {
		for _, q := range curveQuantiles {
			s.Curve = append(s.Curve, Point{Percentile: q, Ms: usToMs(valueAt(r.latency, q))})
		}
	}
	return s
}

func valueAt(h *hdrhistogram.Histogram, q float64) int64 {
	switch q {
	case 0:
		return h.Min()
	case 100:
		return h.Max()
	}
	return h.ValueAtQuantile(q)
}

func stats(h *hdrhistogram.Histogram) Stats {
	if h.TotalCount() == 0 {
		return Stats{}
	}
	return Stats{
		Min:  usToMs(h.Min()),
		Mean: round3(h.Mean() / 1000),
		P50:  usToMs(h.ValueAtQuantile(50)),
		P90:  usToMs(h.ValueAtQuantile(90)),
		P99:  usToMs(h.ValueAtQuantile(99)),
		P999: usToMs(h.ValueAtQuantile(99.9)),
		Max:  usToMs(h.Max()),
	}
}

func usToMs(us int64) float64 { return round3(float64(us) / 1000) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// ErrorKinds returns the error kinds of s, most frequent first.
func (s Summary) ErrorKinds() []string {
	kinds := make([]string, 0, len(s.Errors))
	for k := range s.Errors {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if s.Errors[kinds[i]] != s.Errors[kinds[j]] {
			return s.Errors[kinds[i]] > s.Errors[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	return kinds
}
