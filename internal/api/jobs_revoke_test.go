package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestJobWatchersEndWhenAccessEnds: while an owner watches a running job (an event stream, a
// followed output and a long poll, all riding the shared poll of her credential), her access
// ends: she deletes the credential or the system, or an operator disables her or the system.
// Every watcher must end within a few poll intervals with the refusal, and the shared poll must
// stop running squeue as her remote account: before, the poll redialed with the deleted key
// and the streams ran until the job ended.
func TestJobWatchersEndWhenAccessEnds(t *testing.T) {
	e, c := newJobsEnv(t)
	e.api.deps.Verifier = operatorVerifier{Verifier: e.api.deps.Verifier, ops: []string{"root"}}
	dir := e.srv.MkTemp(t)
	for _, tc := range []struct {
		name, owner string
		revoke      func(owner string) resp
		status      int // of a request made afterwards
	}{
		{"credential deleted", "ann", func(o string) resp { return e.do(o, "DELETE", "/v1/systems/hpc/credential", nil) }, 409},
		{"system deleted", "ben", func(o string) resp { return e.do(o, "DELETE", "/v1/systems/hpc", nil) }, 404},
		{"user disabled", "cat", func(o string) resp {
			return e.do("root", "PUT", "/v1/admin/users/"+o+"/disabled", map[string]any{"disabled": true})
		}, 403},
		{"system disabled", "dan", func(o string) resp {
			return e.do("root", "PUT", "/v1/admin/users/"+o+"/systems/hpc/disabled", map[string]any{"disabled": true})
		}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.register(tc.owner, "hpc")
			base := "/v1/systems/hpc/jobs"
			r := e.do(tc.owner, "POST", base, map[string]any{"script": "#!/bin/sh\nsleep 120\n", "working_dir": dir, "output": "w-%j.txt"})
			if r.status != 201 {
				t.Fatalf("submit: %d %s", r.status, r.body)
			}
			id := jobOf(t, r).ID
			// Not t.Context(): it is done before cleanups run. Without the fix the streams run
			// until the job ends, and the test server waits for them when it closes.
			cancelJob := func() { _, _ = c.Command(context.Background(), "scancel", id) }
			t.Cleanup(cancelJob)
			if r := e.do(tc.owner, "GET", base+"/"+id+"?wait=running&timeout=30", nil); jobOf(t, r).State != "running" {
				t.Fatalf("not running: %s", r.body)
			}
			ended := make(chan string, 3)
			stream := func(path, accept string, last func(line string) string) {
				req, _ := http.NewRequest("GET", e.url+path, nil)
				req.Header.Set("Authorization", "Bearer "+e.token(tc.owner))
				req.Header.Set("Accept", accept)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					ended <- err.Error()
					return
				}
				defer res.Body.Close()
				seen := ""
				sc := bufio.NewScanner(res.Body)
				for sc.Scan() {
					if l := last(sc.Text()); l != "" {
						seen = l
					}
				}
				ended <- path + ": " + seen
			}
			go stream(base+"/"+id+"/events", "text/event-stream", func(l string) string { n, _ := strings.CutPrefix(l, "event: "); return n })
			go stream(base+"/"+id+"/output?follow=true", "application/x-ndjson", func(l string) string {
				var v struct{ Type string }
				_ = json.Unmarshal([]byte(l), &v)
				return v.Type
			})
			go func() {
				r := e.do(tc.owner, "GET", base+"/"+id+"?wait=finished&timeout=60", nil)
				ended <- "wait: " + http.StatusText(r.status)
			}()
			time.Sleep(time.Second) // every watcher has seen the job running
			if r := tc.revoke(tc.owner); r.status/100 != 2 {
				t.Fatalf("revoke: %d %s", r.status, r.body)
			}
			deadline := time.After(10 * time.Second)
			for range 3 {
				select {
				case how := <-ended:
					if strings.HasSuffix(how, ": done") || strings.HasSuffix(how, ": end") || strings.HasSuffix(how, ": OK") {
						t.Errorf("%s: ended as if allowed", how)
					}
				case <-deadline:
					cancelJob()
					t.Fatal("a watcher still runs 10 s after the owner's access ended")
				}
			}
			if r := e.do(tc.owner, "GET", base+"/"+id, nil); r.status != tc.status {
				t.Errorf("afterwards: %d %s (want %d)", r.status, r.body, tc.status)
			}
		})
	}
}
