package openloop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"
)

// sleepServer answers every request after d; with serial, one request at a time.
func sleepServer(t *testing.T, d time.Duration, serial bool) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if serial {
			mu.Lock()
			defer mu.Unlock()
		}
		time.Sleep(d)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"exit_status":0}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// getOp is an Op that GETs url and fails on a status other than 200.
func getOp(url string) Op {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return &StatusError{Code: res.StatusCode}
		}
		return nil
	}
}

func TestRunOpenLoop(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rate        float64
		duration    time.Duration
		sleep       time.Duration
		serial      bool
		maxInFlight int
		check       func(t *testing.T, s Summary, sends []time.Duration)
	}{
		{
			// The scheduler sends Rate×Duration requests, each no earlier than its slot, spread
			// over the window (not bunched at the start or squeezed by slow responses).
			name: "scheduler keeps the arrival rate while responses are slow", rate: 100, duration: 500 * time.Millisecond, sleep: 30 * time.Millisecond,
			check: func(t *testing.T, s Summary, sends []time.Duration) {
				if s.Scheduled != 50 || s.OK != 50 || s.Failed != 0 {
					t.Fatalf("scheduled %d ok %d failed %d, want 50/50/0", s.Scheduled, s.OK, s.Failed)
				}
				for i, at := range sends {
					if slot := time.Duration(i) * 10 * time.Millisecond; at < slot-time.Millisecond {
						t.Fatalf("request %d sent at %v, before its slot %v", i, at, slot)
					}
				}
				if span := sends[len(sends)-1] - sends[0]; span < 480*time.Millisecond || span > 900*time.Millisecond {
					t.Fatalf("sends spread over %v, want about 490ms", span)
				}
				// 30 ms responses at 100/s overlap: an open loop must not wait for them.
				if s.Latency.P50 < 29 {
					t.Fatalf("p50 %v ms is below the server's 30 ms", s.Latency.P50)
				}
			},
		},
		{
			// A server that handles one request per 50 ms, offered 40/s with one request in
			// flight: each waits for the previous one. Latency from the scheduled send grows
			// with the queue, although every response takes about 50 ms once sent.
			name: "queueing behind a slow server counts (coordinated omission)", rate: 40, duration: 500 * time.Millisecond, sleep: 50 * time.Millisecond, serial: true, maxInFlight: 1,
			check: func(t *testing.T, s Summary, _ []time.Duration) {
				if s.OK != 20 {
					t.Fatalf("ok %d, want 20", s.OK)
				}
				// The last request is scheduled at 475 ms and cannot finish before 20×50 ms.
				if s.Latency.Max < 450 {
					t.Fatalf("max latency %v ms hides the queue (want ≥ 450 ms)", s.Latency.Max)
				}
				if s.Service.P50 > 200 || s.Latency.P90 < 2*s.Service.P90 {
					t.Fatalf("service p50 %v p90 %v, latency p90 %v: the correction is missing", s.Service.P50, s.Service.P90, s.Latency.P90)
				}
				if s.AchievedRate > 25 {
					t.Fatalf("achieved %v/s, but the server can do only 20/s", s.AchievedRate)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := sleepServer(t, tc.sleep, tc.serial)
			op := getOp(srv.URL)
			var mu sync.Mutex
			var sends []time.Duration
			start := time.Now()
			rec, err := Run(t.Context(), Plan{Rate: tc.rate, Duration: tc.duration, MaxInFlight: tc.maxInFlight, Timeout: 5 * time.Second}, func(ctx context.Context) error {
				mu.Lock()
				sends = append(sends, time.Since(start))
				mu.Unlock()
				return op(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			sort.Slice(sends, func(i, j int) bool { return sends[i] < sends[j] })
			tc.check(t, rec.Summary(), sends)
		})
	}
}

// TestRunDrainBoundsTheRun checks that a target that never answers cannot stretch a run past
// Duration+Drain, and that requests it kept from being sent still count as failures.
func TestRunDrainBoundsTheRun(t *testing.T) {
	start := time.Now()
	rec, err := Run(t.Context(), Plan{Rate: 20, Duration: 200 * time.Millisecond, MaxInFlight: 1, Timeout: time.Minute, Drain: 100 * time.Millisecond},
		func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("run took %v, want about 300ms", took)
	}
	s := rec.Summary()
	want := map[string]int{"timeout": 1, "not sent (in-flight cap)": 3}
	if s.Scheduled != 4 || s.OK != 0 || s.Failed != 4 || len(s.Errors) != 2 || s.Errors["timeout"] != want["timeout"] || s.Errors["not sent (in-flight cap)"] != want["not sent (in-flight cap)"] {
		t.Fatalf("summary %+v, want errors %v", s, want)
	}
}

func TestBurstSchedulesAllAtOnce(t *testing.T) {
	srv := sleepServer(t, 20*time.Millisecond, false)
	rec, err := Burst(t.Context(), 40, 5*time.Second, getOp(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Summary()
	if s.Scheduled != 40 || s.OK != 40 || s.Latency.Min < 19 || s.WallS <= 0.019 {
		t.Fatalf("burst summary %+v", s)
	}
}

func TestPlanValidation(t *testing.T) {
	for _, p := range []Plan{{Rate: 0, Duration: time.Second}, {Rate: 1, Duration: 0}, {Rate: 1, Duration: time.Second, MaxInFlight: -1}} {
		if _, err := Run(t.Context(), p, func(context.Context) error { return nil }); err == nil {
			t.Errorf("plan %+v accepted", p)
		}
	}
	if _, err := Burst(t.Context(), 0, time.Second, func(context.Context) error { return nil }); err == nil {
		t.Error("burst of 0 accepted")
	}
}
