package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/jobs"
)

// BenchmarkJobs measures batch jobs through sshapi beside `ssh login sbatch` over a fresh
// connection per job (OpenSSH's ssh client), against one real sshd and a one-node Slurm cluster,
// with the default poll interval (1 s):
//
//   - submit_to_running: one job at a time, submit until it is seen RUNNING (sshapi: POST, then
//     GET ?wait=running; ssh: sbatch, then `squeue -j` over a fresh connection until RUNNING);
//
//   - submit_100: 100 jobs from 10 users at once (sshapi: 10 users with 10 concurrent
//     submitters each; ssh: 10 concurrent connections, MaxStartups' start);
//
//   - watch_1000: 100 clients long-polling 1,000 pending jobs of one credential for 10 s; the
//     commands sshd starts in that window are counted in its log.
//
//     go test -run '^$' -bench Jobs -benchtime 1x ./internal/api/
func BenchmarkJobs(b *testing.B) {
	e, c := newJobsEnvInterval(b, time.Second)
	users := make([]string, 10)
	for i := range users {
		users[i] = fmt.Sprintf("u%d", i)
		e.register(users[i], "hpc")
	}
	dir := e.srv.MkTemp(b)
	ssh := newSSHBaseline(b, e, c.Conf)
	cancelAll := func() {
		_, _ = c.Command(b.Context(), "scancel", "-u", e.srv.User)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			out, err := c.Command(b.Context(), "squeue", "-h", "-t", "PD,R,CG", "-o", "%i")
			if err == nil && strings.TrimSpace(out) == "" {
				return
			}
			time.Sleep(50 * time.Millisecond) // squeue is the only way to see the queue drain
		}
		b.Fatal("queue not empty after 30 s")
	}
	submit := func(user, script string, extra ...string) (string, error) {
		body := map[string]any{"script": script, "working_dir": dir, "output": "/dev/null"}
		if len(extra) > 0 {
			body["extra_args"] = extra
		}
		r := e.doTB(user, "POST", "/v1/systems/hpc/jobs", body)
		if r.status != 201 {
			return "", fmt.Errorf("submit: %d %s", r.status, r.body)
		}
		var j jobs.Job
		_ = json.Unmarshal(r.body, &j)
		return j.ID, nil
	}

	b.Run("submit_to_running", func(b *testing.B) {
		const samples = 8
		var api, base []time.Duration
		for range samples {
			t0 := time.Now()
			id, err := submit("u0", "#!/bin/sh\nsleep 1\n")
			if err != nil {
				b.Fatal(err)
			}
			r := e.doTB("u0", "GET", "/v1/systems/hpc/jobs/"+id+"?wait=running&timeout=60", nil)
			if r.status != 200 {
				b.Fatalf("wait: %d %s", r.status, r.body)
			}
			api = append(api, time.Since(t0))
			t0 = time.Now()
			id, err = ssh.run("sbatch --parsable -o /dev/null", "#!/bin/sh\nsleep 1\n")
			if err != nil {
				b.Fatal(err)
			}
			for {
				st, err := ssh.run("squeue -h -j "+strings.TrimSpace(id)+" -o %T", "")
				if err != nil {
					b.Fatal(err)
				}
				if st = strings.TrimSpace(st); st != "PENDING" && st != "CONFIGURING" {
					break
				}
			}
			base = append(base, time.Since(t0))
			cancelAll()
		}
		b.ReportMetric(ms(median(api)), "sshapi_p50_ms")
		b.ReportMetric(ms(median(base)), "ssh_p50_ms")
		b.Logf("submit→RUNNING over %d jobs: sshapi p50 %.0f ms (max %.0f), ssh+poll p50 %.0f ms (max %.0f)", samples,
			ms(median(api)), ms(slices.Max(api)), ms(median(base)), ms(slices.Max(base)))
	})

	b.Run("submit_100", func(b *testing.B) {
		pending := "--begin=now+1hour" // the jobs wait, so only submission is measured
		var errs atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for _, u := range users {
			for range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := submit(u, "#!/bin/sh\n", pending); err != nil {
						errs.Add(1)
						b.Log(err)
					}
				}()
			}
		}
		wg.Wait()
		api := time.Since(t0)
		cancelAll()
		sem := make(chan struct{}, 10)
		t0 = time.Now()
		for range 100 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if _, err := ssh.run("sbatch --parsable -o /dev/null --begin=now+1hour", "#!/bin/sh\n"); err != nil {
					errs.Add(1)
					b.Log(err)
				}
			}()
		}
		wg.Wait()
		base := time.Since(t0)
		cancelAll()
		b.ReportMetric(100/api.Seconds(), "sshapi_jobs/s")
		b.ReportMetric(100/base.Seconds(), "ssh_jobs/s")
		b.Logf("100 submits: sshapi (10 users × 10 at once) %v = %.1f jobs/s; ssh (fresh connection each, 10 at once) %v = %.1f jobs/s; %d errors",
			api.Round(time.Millisecond), 100/api.Seconds(), base.Round(time.Millisecond), 100/base.Seconds(), errs.Load())
	})

	b.Run("watch_1000", func(b *testing.B) {
		var ids []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 20)
		for range 1000 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				id, err := submit("u0", "#!/bin/sh\n", "--begin=now+1hour")
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if len(ids) != 1000 {
			b.Fatalf("%d jobs submitted", len(ids))
		}
		// Everyone starts watching; then the counted window.
		const window = 10 * time.Second
		started := countSessions(e.srv.Log())
		t0 := time.Now()
		var failed atomic.Int64
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 1000}}
		for cl := range 100 {
			for k := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequest("GET", e.url+"/v1/systems/hpc/jobs/"+ids[cl*10+k]+"?wait=finished&timeout="+strconv.Itoa(int(window.Seconds())), nil)
					req.Header.Set("Authorization", "Bearer "+e.token("u0"))
					res, err := client.Do(req)
					if err != nil {
						failed.Add(1)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 || res.Header.Get("X-Wait-Reached") != "false" {
						failed.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		elapsed := time.Since(t0)
		cmds := countSessions(e.srv.Log()) - started
		cancelAll()
		b.ReportMetric(float64(cmds)/elapsed.Seconds(), "commands/s")
		b.Logf("100 clients × 10 long polls on 1,000 pending jobs for %v: sshd started %d commands (%.2f/s, one credential); %d polls failed",
			elapsed.Round(time.Millisecond), cmds, float64(cmds)/elapsed.Seconds(), failed.Load())
		if float64(cmds) > elapsed.Seconds()+2 {
			b.Fatalf("%d commands in %v: more than one squeue per second", cmds, elapsed)
		}
	})
}

// countSessions counts the command sessions in sshd's (VERBOSE) log.
func countSessions(log string) int { return strings.Count(log, "Starting session: command") }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// doTB is do for a benchmark's goroutines: it returns errors in the response instead of
// failing the test from another goroutine.
func (e *env) doTB(user, method, path string, body any) resp {
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, e.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+e.token(user))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return resp{status: 599, body: []byte(err.Error())}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// sshBaseline runs commands with OpenSSH's ssh client, a fresh connection each.
type sshBaseline struct {
	args []string
	conf string
}

func newSSHBaseline(tb testing.TB, e *env, conf string) *sshBaseline {
	dir := tb.TempDir()
	key, kh := filepath.Join(dir, "id"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(key, e.srv.PrivateKeyPEM, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(kh, []byte(fmt.Sprintf("[%s]:%d %s\n", e.srv.Host, e.srv.Port, e.srv.AuthorizedHostKey())), 0o600); err != nil {
		tb.Fatal(err)
	}
	return &sshBaseline{conf: conf, args: []string{"-i", key, "-o", "UserKnownHostsFile=" + kh, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-p", strconv.Itoa(e.srv.Port), e.srv.User + "@" + e.srv.Host}}
}

func (s *sshBaseline) run(command, stdin string) (string, error) {
	cmd := exec.Command("ssh", append(slices.Clone(s.args), "SLURM_CONF="+s.conf+" "+command)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("ssh %s: %w: %s", command, err, ee.Stderr)
		}
		return "", fmt.Errorf("ssh %s: %w", command, err)
	}
	return string(out), nil
}
