package bench

import (
	"strings"
	"testing"
)

// TestTusSummaries: medians per path and target (failed runs counted apart), the ratio to curl
// on the same path, and the table that shows them.
func TestTusSummaries(t *testing.T) {
	run := func(path, target string, chunk int64, mbps float64, failed bool) TusRun {
		r := TusRun{Path: path, Target: target, ChunkBytes: chunk, MBps: mbps}
		if failed {
			r.Error, r.MBps = "cut", 0
		}
		return r
	}
	r := &TusReport{Runs: []TusRun{
		run("loopback", TusCurlPut, 0, 100, false),
		run("loopback", TusClient, 8<<20, 80, false),
		run("loopback", TusCurlPut, 0, 120, false),
		run("loopback", TusClient, 8<<20, 90, false),
		run("loopback", TusClient, 8<<20, 0, true),
		run("wan", TusClient, 0, 10, false),
		run("wan", TusCurlPut, 0, 0, true),
	}}
	tests := []struct {
		path, target string
		chunk        int64
		median       float64
		failed       int
		vsCurl       float64
	}{
		{"loopback", TusCurlPut, 0, 110, 0, 1},
		{"loopback", TusClient, 8 << 20, 85, 1, 85.0 / 110},
		{"wan", TusClient, 0, 10, 0, 0}, // curl failed there: no ratio
		{"wan", TusCurlPut, 0, 0, 1, 0},
	}
	got := r.Summaries()
	if len(got) != len(tests) {
		t.Fatalf("%d summaries, want %d: %+v", len(got), len(tests), got)
	}
	for i, tc := range tests {
		s := got[i]
		if s.Path != tc.path || s.Target != tc.target || s.ChunkBytes != tc.chunk || s.MedianMBps != tc.median || s.Failed != tc.failed || s.VsCurl != tc.vsCurl {
			t.Errorf("summary %d = %+v, want %+v", i, s, tc)
		}
	}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| loopback | tus (sshapi put) | 8 MiB | 3 | 1 | 85.0 | 80.0–90.0 | 0.77× |", "| wan | tus (sshapi put) | whole file | 1 | 0 | 10.0 | 10.0–10.0 | – |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
