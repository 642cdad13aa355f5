package jobs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/slurmtest"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// env is a real cluster reached over a real sshd as the test user.
type env struct {
	cluster *slurmtest.Cluster
	srv     *sshtest.Server
	slurm   *Slurm
	key     sshpool.Key
	poller  *Poller[sshpool.Key]
	dir     string // a fresh directory in the remote user's home
}

func setup(t *testing.T) *env { return setupWith(t, slurmtest.Options{}) }

func setupWith(t *testing.T, opts slurmtest.Options) *env {
	t.Helper()
	c := slurmtest.New(t, opts)
	srv := sshtest.New(t, sshtest.Options{ExtraConfig: c.SSHDConfig() + "MaxSessions 64\n"})
	p := sshpool.New(sshpool.Config{}, nil, nil)
	_ = p.Start(t.Context())
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	cfg := &ssh.ClientConfig{User: srv.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(srv.Signer)}}
	if err := (sshpool.HostKeyPolicy{Keys: []string{srv.AuthorizedHostKey()}}).Apply(cfg); err != nil {
		t.Fatal(err)
	}
	tg := sshpool.Target{Key: sshpool.Key{System: "hpc", User: srv.User, Credential: "k"}, Addr: srv.Addr, Config: cfg, MaxSessions: 64}
	poller := NewPoller[sshpool.Key](PollerConfig{Interval: 250 * time.Millisecond})
	poller.Start()
	t.Cleanup(poller.Stop)
	return &env{cluster: c, srv: srv, key: tg.Key, poller: poller, dir: srv.MkTemp(t),
		slurm: &Slurm{Run: command.Exec{Pool: p, Target: tg}, Sched: Scheduler{Accounting: opts.Accounting}}}
}

func (e *env) submit(t *testing.T, spec Spec) string {
	t.Helper()
	id, err := e.slurm.Submit(t.Context(), &spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return id
}

func (e *env) wait(t *testing.T, id, want string) *Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	j, err := e.poller.Wait(ctx, e.key, e.slurm, e.srv.User, id, want)
	if err != nil {
		t.Fatalf("wait %s %s: %v (last %+v)", id, want, err, j)
	}
	return j
}

func TestSlurm(t *testing.T) {
	e := setup(t)
	ctx := t.Context()
	user := e.srv.User

	t.Run("submit, wait, exit code, resolved output", func(t *testing.T) {
		hostile := `it's "quoted"; touch pwned $(id) #`
		id := e.submit(t, Spec{Script: "#!/bin/sh\necho \"hello $GREETING\"\necho oops >&2\nexit 3\n", Name: hostile,
			WorkingDir: e.dir, Output: "%x-%j.out", Error: "err-%j.txt", TimeLimit: "5", Env: map[string]string{"GREETING": `wo'rld $HOME`}})
		j, err := e.poller.Job(ctx, e.key, e.slurm, user, id)
		if err != nil {
			t.Fatalf("job right after submit: %v", err)
		}
		if j.Name != hostile {
			t.Fatalf("name %q", j.Name)
		}
		j = e.wait(t, id, "finished")
		if j.State != StateFailed || j.ExitCode == nil || *j.ExitCode != 3 || j.Signal != nil {
			t.Fatalf("finished job %+v", j)
		}
		if want := filepath.Join(e.dir, hostile+"-"+id+".out"); j.Stdout != want {
			t.Fatalf("stdout %q, want %q", j.Stdout, want)
		}
		if want := filepath.Join(e.dir, "err-"+id+".txt"); j.Stderr != want {
			t.Fatalf("stderr %q, want %q", j.Stderr, want)
		}
		var out bytes.Buffer
		if err := e.slurm.Tail(ctx, j.Stdout, 100, &out); err != nil || out.String() != "hello wo'rld $HOME\n" {
			t.Fatalf("tail %q %v", out.String(), err)
		}
		if _, err := os.Stat(filepath.Join(e.srv.Home, "pwned")); err == nil {
			t.Fatal("a job name reached the shell")
		}
		script, err := e.slurm.Script(ctx, id)
		if err != nil || !strings.Contains(script, "echo oops") {
			t.Fatalf("script %q %v", script, err)
		}
	})

	t.Run("signal", func(t *testing.T) {
		id := e.submit(t, Spec{Script: "#!/bin/sh\nkill -9 $$\n", WorkingDir: e.dir})
		j := e.wait(t, id, "finished")
		if j.Signal == nil || *j.Signal != 9 {
			t.Fatalf("signal: %+v", j)
		}
	})

	t.Run("array tasks", func(t *testing.T) {
		id := e.submit(t, Spec{Script: "#!/bin/sh\necho task $SLURM_ARRAY_TASK_ID\n", WorkingDir: e.dir, Array: "1-3", Output: "arr-%A_%a.out"})
		j := e.wait(t, id+"_2", "finished")
		if j.ArrayJobID != id || j.ArrayTaskID != "2" || j.State != StateCompleted || *j.ExitCode != 0 {
			t.Fatalf("task: %+v", j)
		}
		if want := filepath.Join(e.dir, "arr-"+id+"_2.out"); j.Stdout != want {
			t.Fatalf("task stdout %q, want %q", j.Stdout, want)
		}
		var out bytes.Buffer
		if err := e.slurm.Tail(ctx, j.Stdout, 100, &out); err != nil || out.String() != "task 2\n" {
			t.Fatalf("tail %q %v", out.String(), err)
		}
		list, err := e.slurm.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range list {
			if l.ArrayJobID == id {
				n++
			}
		}
		if n != 3 {
			t.Fatalf("%d tasks of %s listed: %+v", n, id, list)
		}
	})

	t.Run("script paths test(1) reads as operators", func(t *testing.T) {
		// Relative to the home, where sbatch runs: `test -f = -a -r =` took "=" for the
		// operator and refused a readable script as unreadable.
		for _, name := range []string{"=", "(", "!"} {
			p := filepath.Join(e.srv.Home, name)
			if err := os.WriteFile(p, []byte("#!/bin/sh\ntrue\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(p) })
			if _, err := e.slurm.Submit(ctx, &Spec{ScriptPath: name, WorkingDir: e.dir}); err != nil {
				t.Errorf("script_path %q: %v", name, err)
			}
		}
	})

	t.Run("script path and dependency", func(t *testing.T) {
		p := filepath.Join(e.dir, "job.sh")
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho from file\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		first := e.submit(t, Spec{Script: "#!/bin/sh\nsleep 1\n", WorkingDir: e.dir})
		id := e.submit(t, Spec{ScriptPath: p, WorkingDir: e.dir, Dependency: "afterok:" + first, Output: "f.out"})
		j := e.wait(t, id, "finished")
		first0, _ := e.poller.Job(ctx, e.key, e.slurm, user, first)
		if j.State != StateCompleted || j.StartTime.Before(*first0.EndTime) {
			t.Fatalf("dependent job %+v started before %+v ended", j, first0)
		}
	})

	t.Run("hold, release, cancel", func(t *testing.T) {
		id := e.submit(t, Spec{Script: "#!/bin/sh\nsleep 60\n", WorkingDir: e.dir, ExtraArgs: []string{"--comment=x y"}})
		if err := e.slurm.Hold(ctx, user, id); err != nil {
			t.Fatal(err)
		}
		j, err := e.slurm.Get(ctx, user, id)
		if err != nil || !j.Held {
			t.Fatalf("held: %+v %v", j, err)
		}
		if err := e.slurm.Release(ctx, user, id); err != nil {
			t.Fatal(err)
		}
		e.wait(t, id, "running")
		if err := e.slurm.Cancel(ctx, user, id); err != nil {
			t.Fatal(err)
		}
		if j := e.wait(t, id, "finished"); j.State != StateCancelled {
			t.Fatalf("cancelled: %+v", j)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		var fe *FieldError
		field := func(err error) string {
			if errors.As(err, &fe) {
				return fe.Field
			}
			return "not a field error: " + errString(err)
		}
		cases := []struct {
			spec  Spec
			field string
		}{
			{Spec{Script: "#!/bin/sh\n", Partition: "nope"}, "partition"},
			{Spec{Script: "#!/bin/sh\n", TimeLimit: "soon"}, "time_limit"},
			{Spec{ScriptPath: "/root/secret.sh"}, "script_path"},
			{Spec{Script: "#!/bin/sh\n", WorkingDir: "/root/nope"}, "working_dir"},
			{Spec{Script: "#!/bin/sh\n" + strings.Repeat("#", MaxScriptBytes)}, "script"},
			{Spec{Script: "#!/bin/sh\n", ExtraArgs: []string{"--wrap=id"}}, "extra_args"},
			{Spec{Script: "#!/bin/sh\n", Env: map[string]string{"SLURM_CONF": "/x"}}, "env"},
			{Spec{Script: "#!/bin/sh\n", Env: map[string]string{"LD_AUDIT": "/tmp/x.so"}}, "env"}, // every LD_*, as documented
			{Spec{Script: "#!/bin/sh\n", Name: "a\x1fb"}, "name"},
		}
		for _, c := range cases {
			_, err := e.slurm.Submit(ctx, &c.spec)
			if got := field(err); got != c.field {
				t.Errorf("%+v: field %q, want %q (%v)", c.spec.ExtraArgs, got, c.field, err)
			}
		}
		if err := e.slurm.Cancel(ctx, user, "999999"); !errors.Is(err, ErrNotFound) {
			t.Errorf("cancel unknown: %v", err)
		}
		if _, err := e.poller.Job(ctx, e.key, e.slurm, user, "12; id"); field(err) != "job_id" {
			t.Errorf("malformed id: %v", err)
		}
		// A job of another user (root, submitted on the cluster directly).
		out, err := e.cluster.Command(ctx, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 30")
		if err != nil {
			t.Fatal(err)
		}
		other := strings.TrimSpace(out)
		if err := e.slurm.Cancel(ctx, user, other); !errors.Is(err, ErrForbidden) {
			t.Errorf("cancel another's job: %v", err)
		}
		if _, err := e.poller.Job(ctx, e.key, e.slurm, user, other); !errors.Is(err, ErrForbidden) {
			t.Errorf("show another's job: %v", err)
		}
		if j, err := e.cluster.Command(ctx, "squeue", "-h", "-j", other, "-o", "%T"); err != nil || strings.TrimSpace(j) == "CANCELLED" {
			t.Errorf("another's job was touched: %q %v", j, err)
		}
		if _, err := e.cluster.Command(ctx, "scancel", other); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("shared polling", func(t *testing.T) {
		const jobs, watchers = 10, 50
		var ids []string
		for range jobs {
			ids = append(ids, e.submit(t, Spec{Script: "#!/bin/sh\nsleep 0.5\n", WorkingDir: e.dir, Output: "/dev/null"}))
		}
		before := e.poller.Polls(e.key)
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, watchers)
		for i := range watchers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				if _, err := e.poller.Wait(wctx, e.key, e.slurm, user, ids[i%jobs], "finished"); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		polls := e.poller.Polls(e.key) - before
		limit := int64(time.Since(start)/e.poller.Interval()) + 1
		t.Logf("%d watchers of %d jobs: %d squeue runs in %v", watchers, jobs, polls, time.Since(start))
		if polls > limit {
			t.Fatalf("%d squeue runs in %v: more than one per interval", polls, time.Since(start))
		}
	})

	t.Run("controller down", func(t *testing.T) {
		id := e.submit(t, Spec{Script: "#!/bin/sh\nsleep 9\n", WorkingDir: e.dir, Output: "/dev/null"})
		e.wait(t, id, "running")
		// The waiter must have seen the job before the controller stops: a wait that starts
		// during the outage answers ErrUnavailable at once (503 to an API client), which is
		// not what this case is about.
		seen := make(chan struct{})
		var once sync.Once
		e.poller.judged = func(jid string) {
			if jid == id {
				once.Do(func() { close(seen) })
			}
		}
		defer func() { e.poller.judged = nil }()
		done := make(chan *Job, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			j, _ := e.poller.Wait(wctx, e.key, e.slurm, user, id, "finished")
			done <- j
		}()
		select {
		case <-seen:
		case j := <-done:
			t.Fatalf("the watch ended before the outage: %+v", j)
		case <-time.After(30 * time.Second):
			t.Fatal("the watch never judged the job")
		}
		t0 := time.Now()
		if err := e.cluster.StopController(); err != nil {
			t.Fatal(err)
		}
		t.Logf("controller stopped in %v", time.Since(t0))
		if _, err := e.slurm.Get(ctx, user, id); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("get with the controller down: %v", err)
		}
		if _, err := e.slurm.Submit(ctx, &Spec{Script: "#!/bin/sh\n"}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("submit with the controller down: %v", err)
		}
		t.Logf("refusals after %v", time.Since(t0))
		if err := e.cluster.StartController(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("controller back after %v", time.Since(t0))
		j := <-done
		t.Logf("watch resumed after %v", time.Since(t0))
		if j == nil || !j.Finished {
			t.Fatalf("watch did not resume: %+v", j)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestSlurmAccounting: with slurmdbd, a finished job shows its efficiency, a job the controller
// has forgotten is read from accounting, and a listing since a time finds it.
func TestSlurmAccounting(t *testing.T) {
	e := setupWith(t, slurmtest.Options{Accounting: true})
	ctx := t.Context()
	user := e.srv.User
	since := time.Now().Add(-time.Minute)
	id := e.submit(t, Spec{Script: "#!/bin/sh\ni=0; while [ $i -lt 1500000 ]; do i=$((i+1)); done\nexit 2\n", WorkingDir: e.dir,
		Name: "burn", Output: "/dev/null", Memory: "100M"})
	e.wait(t, id, "finished")
	var j *Job
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if j, err = e.poller.Job(ctx, e.key, e.slurm, user, id); err != nil {
			t.Fatal(err)
		}
		if j.Efficiency != nil && j.Efficiency.RequestedMemoryBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			out, _ := e.cluster.Command(ctx, "sacct", "-n", "-P", "-j", id, "-o", strings.Join(sacctFields, ","))
			t.Fatalf("no efficiency from accounting: %+v %+v\n%s", j, j.Efficiency, out)
		}
		time.Sleep(100 * time.Millisecond) // the record reaches slurmdbd after the job ends; nothing to await
	}
	ef := j.Efficiency
	if ef.CPUSeconds <= 0 || ef.CPUEfficiency == nil || *ef.CPUEfficiency <= 0 || ef.RequestedMemoryBytes != 100<<20 || ef.MemoryEfficiency == nil {
		t.Fatalf("efficiency %+v", ef)
	}
	if err := e.cluster.ForgetJobs(ctx); err != nil {
		t.Fatal(err)
	}
	old, err := e.slurm.Lookup(ctx, user, id)
	if err != nil || old.Source != "accounting" || old.State != StateFailed || old.ExitCode == nil || *old.ExitCode != 2 || old.Name != "burn" {
		t.Fatalf("forgotten job from accounting: %+v %v", old, err)
	}
	if _, err := e.slurm.Lookup(ctx, user, "99999"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job with accounting: %v", err)
	}
	list, err := e.slurm.Accounting(ctx, since)
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("accounting since: %+v %v", list, err)
	}
}

// TestPollerOwnerBounds: one owner's feeds (credentials polled) and watchers are bounded over
// all of the owner's credentials, and another owner's are not held back by them; a watcher
// closed or a feed gone idle gives its place back.
func TestPollerOwnerBounds(t *testing.T) {
	e := setup(t)
	p := NewPoller[sshpool.Key](PollerConfig{Interval: 250 * time.Millisecond, MaxKeysPerOwner: 2, MaxWatchersPerOwner: 3, Idle: 100 * time.Millisecond})
	p.Start()
	t.Cleanup(p.Stop)
	as := func(owner string) *Slurm { s := *e.slurm; s.Owner = owner; return &s }
	key := func(system string) sshpool.Key { k := e.key; k.System = system; return k }
	alice, bob := as("alice"), as("bob")
	var open []*Watch
	watch := func(k sshpool.Key, s *Slurm) error {
		w, err := p.Watch(k, s)
		if err == nil {
			open = append(open, w)
		}
		return err
	}
	for _, sys := range []string{"a1", "a2"} {
		if err := watch(key(sys), alice); err != nil {
			t.Fatalf("alice's feed %s: %v", sys, err)
		}
	}
	if err := watch(key("a3"), alice); !errors.Is(err, ErrBusy) {
		t.Fatalf("alice's third credential: %v, want ErrBusy (two feeds per owner)", err)
	}
	if err := watch(key("b1"), bob); err != nil {
		t.Fatalf("bob while alice holds her feeds: %v", err)
	}
	if err := watch(key("a1"), alice); err != nil {
		t.Fatalf("alice's third watcher: %v", err)
	}
	if err := watch(key("a2"), alice); !errors.Is(err, ErrBusy) {
		t.Fatalf("alice's fourth watcher: %v, want ErrBusy (three watchers per owner)", err)
	}
	open[0].Close() // one of alice's watchers on a1
	if err := watch(key("a2"), alice); err != nil {
		t.Fatalf("alice's watcher after closing one: %v", err)
	}
	for _, w := range open {
		w.Close()
	}
	// Every watcher closed, the feeds go idle and leave: alice may poll other credentials.
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, err := p.Watch(key("a3"), alice)
		if err == nil {
			w.Close()
			break
		}
		if !errors.Is(err, ErrBusy) || time.Now().After(deadline) {
			t.Fatalf("alice's feeds never left once idle: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
