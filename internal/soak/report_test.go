package soak

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSummarize checks the phase attribution and what counts as a failure: a 5xx that overlapped
// a fault window is reported but allowed, a 503 with Retry-After is allowed anywhere, any other
// 5xx outside the windows fails the run.
func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ws := []Window{{Fault: FaultPG, Name: "postgres-restart#1", Start: at(10), End: at(14)}}
	results := []result{
		{op: "command", start: at(1), latency: 10 * time.Millisecond, status: 200, kind: "ok"},
		{op: "upload", start: at(9.5), latency: time.Second, status: 500, kind: "http 500", detail: "db"}, // overlaps the window
		{op: "stat", start: at(12), latency: 5 * time.Millisecond, status: 502, kind: "http 502"},
		{op: "stat", start: at(20), latency: 5 * time.Millisecond, status: 503, kind: "http 503", retryAf: true},
		{op: "list", start: at(21), latency: 5 * time.Millisecond, kind: "transport"},
	}
	rep := &Report{Windows: ws, LoadStart: t0}
	rep.summarize(results, ws)
	if len(rep.Phases) != 2 || rep.Phases[0].Requests != 3 || rep.Phases[1].Requests != 2 {
		t.Fatalf("phases %+v", rep.Phases)
	}
	if len(rep.Unexpected5xx) != 0 || len(rep.Failures()) != 0 {
		t.Fatalf("unexpected %v, failures %v", rep.Unexpected5xx, rep.Failures())
	}
	if o := rep.Overall; o.WellFormed503 != 1 || o.Other5xx != 2 {
		t.Fatalf("503 + Retry-After %d (want 1), other 5xx %d (want 2)", o.WellFormed503, o.Other5xx)
	}
	if len(rep.Errors5xx) != 3 || rep.Overall.Requests != 5 || len(rep.Timeline) != 5 {
		t.Fatalf("5xx %+v, overall %+v", rep.Errors5xx, rep.Overall)
	}

	bad := &Report{Windows: ws, LoadStart: t0}
	bad.summarize(append(results, result{op: "command", start: at(30), latency: time.Millisecond, status: 500, kind: "http 500"}), ws)
	bad.Check.UploadsLost = []string{"/x"}
	f := bad.Failures()
	if len(f) != 2 || !strings.Contains(strings.Join(f, ";"), "1 acknowledged uploads lost") || !strings.Contains(strings.Join(f, ";"), "1 unexpected 5xx") {
		t.Fatalf("failures %v", f)
	}
	bad.Check.Leftovers = []string{"/h/up/.soak-inflight-3.sshapi-00.part"}
	if f := bad.Failures(); len(f) != 3 || !strings.Contains(strings.Join(f, ";"), "1 leftover .part files") {
		t.Fatalf("a leftover did not fail the run: %v", f)
	}
	var md bytes.Buffer
	if err := bad.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "### Problems") || !strings.Contains(md.String(), "postgres-restart#1") ||
		!strings.Contains(md.String(), ".soak-inflight-3") {
		t.Fatalf("markdown %v:\n%s", err, md.String())
	}
	dir := t.TempDir()
	bad.Samples = []Sample{{T: 0, Instance: "i0", PID: 1, RSSBytes: 30 << 20}, {T: 2, Instance: "i0", PID: 1, RSSBytes: 31 << 20}}
	bad.Samples[1].Goroutines, bad.Samples[1].OpenFiles = 40, 12
	bad.DBSamples = []DBSample{{T: 0, Connections: 4}, {T: 2, Connections: -1}, {T: 4, Connections: 5}}
	names, err := bad.WritePlots(dir)
	if err != nil || len(names) != 5 {
		t.Fatalf("plots %v %v", names, err)
	}
	for _, n := range names {
		if st, err := os.Stat(n); err != nil || st.Size() == 0 || filepath.Dir(n) != dir {
			t.Fatalf("plot %s: %v", n, err)
		}
	}
	if err := bad.WriteJSON(filepath.Join(dir, "r.json")); err != nil {
		t.Fatal(err)
	}
}

// TestGeneric checks that 5xx bodies differing only in request ids, the soak's file names and
// the problem's instance are counted together.
func TestGeneric(t *testing.T) {
	a := `{"title":"Audit entry not recorded","status":503,"detail":"failed (request id soak-up-12)","instance":"/v1/systems/a/content/x/up/soak-up-12"}`
	b := `{"title":"Audit entry not recorded","status":503,"detail":"failed (request id zq3nv5ovlq)","instance":"/v1/systems/a/commands"}`
	if generic(a) != generic(b) {
		t.Fatalf("%s\n%s", generic(a), generic(b))
	}
	if g := generic(a); strings.Contains(g, "instance") || strings.Contains(g, "soak-up-12") {
		t.Fatal(g)
	}
}

func TestPartName(t *testing.T) {
	for name, want := range map[string]bool{".x.sshapi-abc.part": true, ".soak-up-1.sshapi-0192.part": true, "x.part": false, "x.sshapi-1.part": false} {
		if partName.MatchString(name) != want {
			t.Errorf("%s: want %v", name, want)
		}
	}
}

// TestFailuresCountDuplicatedAudit: an acknowledged action with two audit entries (a spool
// replayed twice) fails the run like a missing one.
func TestFailuresCountDuplicatedAudit(t *testing.T) {
	rep := &Report{Check: Check{AuditDuplicated: []string{"upload soak-up-1 /x (2 entries)"}}}
	got := rep.Failures()
	if len(got) != 1 || got[0] != "1 audit entries duplicated" {
		t.Fatalf("failures %q, want the duplicated entry", got)
	}
}
