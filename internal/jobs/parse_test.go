package jobs

import (
	"os"
	"path/filepath"
	"testing"
)

// fixtureVersions are the Slurm releases whose recorded output is in testdata (see
// TestRecordFixtures). Only 22.05 (Debian 12) could be recorded on this project's machines.
var fixtureVersions = []string{"22.05.8"}

func byID(t *testing.T, js []Job) map[string]*Job {
	t.Helper()
	m := map[string]*Job{}
	for i := range js {
		m[js[i].ID] = &js[i]
	}
	return m
}

func TestParseFixtures(t *testing.T) {
	for _, v := range fixtureVersions {
		t.Run(v, func(t *testing.T) {
			dir := filepath.Join("testdata", "slurm-"+v)
			sq, err := os.ReadFile(filepath.Join(dir, "squeue.txt"))
			if err != nil {
				t.Fatal(err)
			}
			list, err := parseSqueue(string(sq))
			if err != nil {
				t.Fatal(err)
			}
			q := byID(t, list)
			if len(list) != 10 {
				t.Fatalf("%d squeue records: %+v", len(list), list)
			}
			check := func(where string, ok bool, j *Job) {
				t.Helper()
				if !ok {
					t.Errorf("%s: %+v", where, j)
				}
			}
			j := q["2"]
			check("failed job", j != nil && j.Name == "exit three" && j.State == StateFailed && j.Finished &&
				j.Stdout == "/home/u/t/exit three-2.out" && j.EndTime != nil, j)
			j = q["5_2"]
			check("array task", j != nil && j.ArrayJobID == "5" && j.ArrayTaskID == "2" && j.State == StatePending &&
				j.Reason == "BeginTime" && j.Stdout == "/home/u/t/a-5_2.out" && j.EndTime == nil, j)
			j = q["7"]
			check("held", j != nil && j.Held && j.State == StatePending, j)
			j = q["6"]
			check("dependency", j != nil && j.Dependency == "afterok:4(unfulfilled)" && j.Reason == "Dependency", j)
			j = q["4"]
			check("running", j != nil && j.State == StateRunning && j.StartTime != nil && j.EndTime == nil &&
				j.NodeList == "n1" && j.TimeLimit == "10:00" && j.Name == "odd Name=x y", j)
			j = q["8"]
			check("cancelled", j != nil && j.State == StateCancelled && j.Finished, j)

			sc, err := os.ReadFile(filepath.Join(dir, "scontrol.txt"))
			if err != nil {
				t.Fatal(err)
			}
			recs, err := parseScontrol(string(sc))
			if err != nil {
				t.Fatal(err)
			}
			s := byID(t, recs)
			j = s["2"]
			check("exit code", j != nil && j.ExitCode != nil && *j.ExitCode == 3 && j.Signal == nil && j.Stdout == "/home/u/t/exit three-2.out", j)
			j = s["3"]
			check("signal", j != nil && j.Signal != nil && *j.Signal == 9 && j.State == StateFailed, j)
			j = s["4"]
			check("name with Key=", j != nil && j.Name == "odd Name=x y" && j.User == "sshapi-test" && j.Stdout == "/home/u/t/slurm-4.out" && j.ExitCode == nil, j)
			j = s["5_[1-3]"]
			check("pending array record", j != nil && j.ArrayJobID == "5" && j.State == StatePending && j.Stdout == "/home/u/t/a-5_%a.out", j)
			j = s["1"]
			check("completed", j != nil && j.State == StateCompleted && *j.ExitCode == 0 && j.SubmitTime != nil && j.StartTime != nil && j.EndTime != nil, j)
		})
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	if _, err := parseSqueue("1\x1f2\x1f\n"); err == nil {
		t.Fatal("a short squeue line was accepted")
	}
	if js, err := parseScontrol("No jobs in the system\n"); err != nil || len(js) != 0 {
		t.Fatalf("%v %v", js, err)
	}
}

func TestExpand(t *testing.T) {
	j := &Job{ID: "7_3", ArrayJobID: "7", ArrayTaskID: "3", Name: "n", User: "u", NodeList: "a1,a2", WorkDir: "/w", rawID: "10"}
	for in, want := range map[string]string{
		"%x-%A_%a.out": "/w/n-7_3.out", "/abs/%j.%u": "/abs/10.u", "%%j": "/w/%j", "o-%4a": "/w/o-0003",
		"%N.log": "/w/a1.log", "t%t": "/w/t%t", "": "",
	} {
		if got := j.expand(in); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNormalise(t *testing.T) {
	for in, want := range map[string]string{"PENDING": StatePending, "COMPLETING": StateRunning, "OUT_OF_MEMORY": StateFailed,
		"DEADLINE": StateTimeout, "REVOKED": StateCancelled, "SOMETHING_NEW": StateUnknown} {
		if got, _ := normalise(in); got != want {
			t.Errorf("normalise(%s) = %s, want %s", in, got, want)
		}
	}
	j := &Job{}
	j.setState("CANCELLED by 1001")
	if j.State != StateCancelled || j.SlurmState != "CANCELLED" || !j.Finished {
		t.Fatalf("%+v", j)
	}
}

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		in         string
		nodes, cpu int
		want       int64
	}{{"100M", 1, 1, 100 << 20}, {"4G", 2, 8, 8 << 30}, {"1000Mc", 1, 4, 4000 << 20}, {"500Mn", 3, 1, 1500 << 20}, {"", 1, 1, 0}, {"2048", 1, 1, 2048 << 20}} {
		if got := requestedMemory(c.in, c.nodes, c.cpu); got != c.want {
			t.Errorf("requestedMemory(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	if got := parseSize("1234K", 1024); got != 1234<<10 {
		t.Errorf("MaxRSS 1234K = %d", got)
	}
	for in, want := range map[string]float64{"00:00.428": 0.428, "01:02:03": 3723, "1-00:00:01": 86401} {
		if got := parseDuration(in); got != want {
			t.Errorf("parseDuration(%q) = %v, want %v", in, got, want)
		}
	}
}
