package api

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/jobs"
	"github.com/sshapi/sshapi/internal/slurmtest"
)

// newJobsEnv is newEnv with a real Slurm cluster whose slurm.conf reaches the scheduler
// commands through the jobs configuration's environment (as an operator would set SLURM_CONF
// for a system).
func newJobsEnv(t testing.TB) (*env, *slurmtest.Cluster) {
	return newJobsEnvInterval(t, 250*time.Millisecond)
}

// newJobsEnvInterval is newJobsEnv with the poll interval.
func newJobsEnvInterval(t testing.TB, interval time.Duration) (*env, *slurmtest.Cluster) {
	t.Helper()
	c := slurmtest.New(t, slurmtest.Options{})
	e := newEnvWith(t, func(_ string, d *Deps, _ **Server) {
		js := jobs.New(jobs.Config{PollInterval: interval, Scheduler: jobs.Scheduler{Env: map[string]string{"SLURM_CONF": c.Conf}}})
		js.Start()
		t.Cleanup(js.Stop)
		d.Jobs = js
	})
	return e, c
}

func jobOf(t *testing.T, r resp) *jobs.Job {
	t.Helper()
	var j jobs.Job
	if err := json.Unmarshal(r.body, &j); err != nil {
		t.Fatalf("not a job: %v: %s", err, r.body)
	}
	return &j
}

func fieldOf(t *testing.T, r resp) string {
	t.Helper()
	m := r.json(t)
	errs, _ := m["errors"].([]any)
	if len(errs) == 0 {
		return ""
	}
	f, _ := errs[0].(map[string]any)["field"].(string)
	return f
}

func TestJobsAPI(t *testing.T) {
	e, c := newJobsEnv(t)
	e.register("alice", "hpc")
	e.register("bob", "own")
	dir := e.srv.MkTemp(t)
	base := "/v1/systems/hpc/jobs"

	// Submit, long-poll to the end, read the output.
	r := e.do("alice", "POST", base, map[string]any{"script": "#!/bin/sh\necho out line\necho err line >&2\n", "working_dir": dir,
		"name": "api test", "output": "o-%j.txt", "error": "e-%j.txt", "time_limit": "1:00"})
	if r.status != 201 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	id := jobOf(t, r).ID
	if r.header.Get("Location") != base+"/"+id {
		t.Fatalf("location %q", r.header.Get("Location"))
	}
	r = e.do("alice", "GET", base+"/"+id+"?wait=finished&timeout=30&script=true", nil)
	j := jobOf(t, r)
	if r.status != 200 || r.header.Get("X-Wait-Reached") != "true" || j.State != jobs.StateCompleted || *j.ExitCode != 0 ||
		j.Stdout != dir+"/o-"+id+".txt" || j.Script == nil || !strings.Contains(*j.Script, "echo out line") {
		t.Fatalf("waited job: %d %s", r.status, r.body)
	}
	if r := e.do("alice", "GET", base+"/"+id+"/output", nil); r.status != 200 || string(r.body) != "out line\n" {
		t.Fatalf("stdout: %d %q", r.status, r.body)
	}
	if r := e.do("alice", "GET", base+"/"+id+"/output?stream=stderr&tail_bytes=5", nil); r.status != 200 || string(r.body) != "line\n" {
		t.Fatalf("stderr tail: %d %q", r.status, r.body)
	}
	r = e.do("alice", "GET", base+"?state=completed&name=api+test", nil)
	var list struct{ Jobs []jobs.Job }
	_ = json.Unmarshal(r.body, &list)
	if r.status != 200 || len(list.Jobs) != 1 || list.Jobs[0].ID != id {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	t.Run("follow output and events", func(t *testing.T) {
		r := e.do("alice", "POST", base, map[string]any{"script": "#!/bin/sh\nfor i in 1 2 3; do echo line $i; sleep 0.4; done\nprintf 'caf\\303\\251\\n'\n",
			"working_dir": dir, "output": "f-%j.txt"})
		if r.status != 201 {
			t.Fatalf("submit: %d %s", r.status, r.body)
		}
		id := jobOf(t, r).ID
		events := make(chan []string, 1)
		go func() { events <- readSSE(t, e, base+"/"+id+"/events") }()
		req, _ := http.NewRequest("GET", e.url+base+"/"+id+"/output?follow=true", nil)
		req.Header.Set("Authorization", "Bearer "+e.token("alice"))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var got strings.Builder
		var end *jobs.Job
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			var l struct {
				Type, Data string
				Job        *jobs.Job
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			switch l.Type {
			case "output":
				got.WriteString(l.Data)
			case "end":
				end = l.Job
			default:
				t.Fatalf("line %s", sc.Text())
			}
		}
		if want := "line 1\nline 2\nline 3\ncafé\n"; got.String() != want || end == nil || end.State != jobs.StateCompleted {
			t.Fatalf("followed %q (want %q), end %+v", got.String(), want, end)
		}
		ev := <-events
		if len(ev) < 2 || ev[len(ev)-1] != "done" {
			t.Fatalf("events %v", ev)
		}
	})

	t.Run("hold, release, cancel, audit", func(t *testing.T) {
		r := e.do("alice", "POST", base, map[string]any{"script": "#!/bin/sh\nsleep 60\n", "working_dir": dir, "output": "/dev/null"})
		id := jobOf(t, r).ID
		if r := e.do("alice", "POST", base+"/"+id+"/hold", nil); r.status != 204 {
			t.Fatalf("hold: %d %s", r.status, r.body)
		}
		if r := e.do("alice", "POST", base+"/"+id+"/release", nil); r.status != 204 {
			t.Fatalf("release: %d %s", r.status, r.body)
		}
		if r := e.do("alice", "GET", base+"/"+id+"?wait=running&timeout=30", nil); jobOf(t, r).State != jobs.StateRunning {
			t.Fatalf("running: %s", r.body)
		}
		if r := e.do("alice", "DELETE", base+"/"+id, nil); r.status != 204 {
			t.Fatalf("cancel: %d %s", r.status, r.body)
		}
		if r := e.do("alice", "GET", base+"/"+id+"?wait=finished&timeout=30", nil); jobOf(t, r).State != jobs.StateCancelled {
			t.Fatalf("cancelled: %s", r.body)
		}
		e.api.access.FlushAudit(t.Context())
		r = e.do("alice", "GET", "/v1/audit?system=hpc", nil)
		for _, want := range []string{`"action":"jobs.submit"`, `"action":"jobs.cancel"`, `"detail":"job ` + id + `"`, `"action":"jobs.hold"`} {
			if !strings.Contains(string(r.body), want) {
				t.Errorf("audit lacks %s: %s", want, r.body)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, c := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"script": "#!/bin/sh\n", "partition": "nope"}, "partition"},
			{map[string]any{"script": "#!/bin/sh\n", "time_limit": "soon"}, "time_limit"},
			{map[string]any{"script_path": "/root/x.sh"}, "script_path"},
			{map[string]any{"script": "#!/bin/sh\n" + strings.Repeat("#", jobs.MaxScriptBytes)}, "script"},
			{map[string]any{"script": "#!/bin/sh\n", "extra_args": []string{"--uid=0"}}, "extra_args"},
			{map[string]any{"script": "#!/bin/sh\n", "bogus": 1}, "bogus"},
		} {
			r := e.do("alice", "POST", base, c.body)
			if r.status != 400 || fieldOf(t, r) != c.field || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%v: %d %s (want 400 naming %s)", c.field, r.status, r.body, c.field)
			}
		}
		if r := e.do("alice", "GET", base+"/12abc", nil); r.status != 400 || fieldOf(t, r) != "job_id" {
			t.Errorf("malformed id: %d %s", r.status, r.body)
		}
		if r := e.do("alice", "DELETE", base+"/999999", nil); r.status != 404 {
			t.Errorf("cancel unknown: %d %s", r.status, r.body)
		}
		if r := e.do("alice", "GET", base+"/999999_3", nil); r.status != 404 {
			t.Errorf("unknown task: %d %s", r.status, r.body)
		}
		out, err := c.Command(t.Context(), "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 30")
		if err != nil {
			t.Fatal(err)
		}
		other := strings.TrimSpace(out)
		if r := e.do("alice", "DELETE", base+"/"+other, nil); r.status != 403 {
			t.Errorf("cancel another user's job: %d %s", r.status, r.body)
		}
		_, _ = c.Command(t.Context(), "scancel", other)
	})

	t.Run("never granted", func(t *testing.T) {
		if r := e.do("alice", "POST", "/v1/systems/hpc/grants", map[string]any{"principal": "user:bob", "path": dir, "access": "write"}); r.status != 201 {
			t.Fatalf("grant: %d %s", r.status, r.body)
		}
		for _, m := range []string{"GET", "POST"} {
			r := e.do("bob", m, "/v1/systems/alice:hpc/jobs", map[string]any{"script": "#!/bin/sh\n"})
			if r.status != 403 {
				t.Errorf("%s by a grantee: %d %s", m, r.status, r.body)
			}
		}
	})

	t.Run("controller down", func(t *testing.T) {
		if err := c.StopController(); err != nil {
			t.Fatal(err)
		}
		// A listing within one poll interval is served from the last poll; the next poll fails.
		var r resp
		awaitState(t, "503 with the controller down", func() bool { r = e.do("alice", "GET", base, nil); return r.status != 200 })
		if err := c.StartController(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r.status != 503 || r.header.Get("Retry-After") == "" {
			t.Fatalf("controller down: %d %v %s", r.status, r.header, r.body)
		}
		awaitState(t, "listing after the controller is back", func() bool { return e.do("alice", "GET", base, nil).status == 200 })
	})
}

// readSSE reads an event stream to its end and returns the event names.
func readSSE(t *testing.T, e *env, path string) []string {
	req, _ := http.NewRequest("GET", e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{err.Error()}
	}
	defer res.Body.Close()
	var names []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, n)
		}
	}
	return names
}
