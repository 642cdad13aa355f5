package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/jobs"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// Batch jobs (Slurm) on a system, as the caller's own remote user. Jobs are never granted: every
// route resolves the system at command level, which only its owner has.

// jobCtx is one request's way to the scheduler.
type jobCtx struct {
	slurm *jobs.Slurm
	key   sshpool.Key
	user  string // the remote account: its jobs are the caller's
	svc   *jobs.Service
}

// jobsOn resolves the caller's system for a jobs route.
func (s *Server) jobsOn(r *http.Request) (*jobCtx, error) {
	if s.deps.Jobs == nil {
		return nil, errStatus(http.StatusServiceUnavailable, "batch jobs are not enabled on this server")
	}
	owner, ref := principal(r).User, r.PathValue("id")
	t, sys, err := s.target(r.Context(), owner, ref)
	if err != nil {
		return nil, err
	}
	// The shared poll of this credential outlives the request: before each poll it decides
	// again, as this request did, and ends every watcher once that is refused (package jobs).
	allowed := func(ctx context.Context) error {
		d, err := s.access.Resolve(ctx, access.Request{Caller: auth.Principal{User: owner}, System: ref, Level: access.Command})
		if err != nil {
			return err
		}
		if d.Target.Key != t.Key || d.Target.Addr != t.Addr {
			return &httpError{status: http.StatusConflict, detail: fmt.Sprintf("system %q changed (its address or credential) while its jobs were watched: ask again", ref)}
		}
		return nil
	}
	return &jobCtx{slurm: &jobs.Slurm{Run: command.Exec{Pool: s.deps.Pool, Target: t}, Sched: s.deps.Jobs.SchedulerFor(sys.Host, sys.Port), Owner: owner, Allowed: allowed},
		key: t.Key, user: t.Key.User, svc: s.deps.Jobs}, nil
}

// jobErr maps the jobs layer's errors to problems.
func jobErr(err error) error {
	var fe *jobs.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return badField(fe.Field, "%s", fe.Message)
	case errors.Is(err, jobs.ErrNotFound):
		return &httpError{status: http.StatusNotFound, detail: err.Error()}
	case errors.Is(err, jobs.ErrForbidden):
		return &httpError{status: http.StatusForbidden, detail: err.Error() + ": jobs are only ever acted on by their own user"}
	case errors.Is(err, jobs.ErrUnavailable):
		return &httpError{status: http.StatusServiceUnavailable, detail: err.Error(), retryAfter: 5}
	case errors.Is(err, jobs.ErrBusy):
		return &httpError{status: http.StatusTooManyRequests, detail: err.Error(), retryAfter: 5}
	}
	return err
}

// noteJob puts the job id into the request's audit entry.
func noteJob(r *http.Request, id string) {
	if n := noteOf(r); n != nil {
		n.mu.Lock()
		n.detail = "job " + id
		n.mu.Unlock()
	}
}

// jobID reads and checks the {job_id} path parameter.
func jobID(r *http.Request) (string, error) {
	id := r.PathValue("job_id")
	if !jobs.ValidJobID(id) {
		return "", badField("job_id", "%q is not a job id (123, or 123_4 for an array task)", id)
	}
	return id, nil
}

// submitJob runs sbatch with the request's script and options: 201 with the new job.
func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) error {
	release, err := s.limits.commands.acquire(principal(r).User)
	if err != nil {
		return err
	}
	defer release()
	var spec jobs.Spec
	if err := decodeJSON(r, &spec); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return jobErr(err)
	}
	jc, err := s.jobsOn(r)
	if err != nil {
		return err
	}
	id, err := jc.slurm.Submit(r.Context(), &spec)
	if err != nil {
		return jobErr(err)
	}
	noteJob(r, id)
	// The new job's own record (one scontrol, not a wait for the next shared poll): it is
	// never "not found" right after its submit.
	j, err := jc.slurm.Get(r.Context(), jc.user, id)
	if err != nil {
		j = &jobs.Job{ID: id, State: jobs.StatePending}
	}
	w.Header().Set("Location", "/v1/systems/"+r.PathValue("id")+"/jobs/"+id)
	writeJSON(w, http.StatusCreated, j)
	return nil
}

// listJobs lists the caller's jobs the controller holds, from the shared poll (at most one
// squeue per credential per interval). Filters: state (normalised or Slurm's, comma-separated),
// name, since (RFC 3339 submit time).
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var states []string
	if v := q.Get("state"); v != "" {
		for _, st := range strings.Split(v, ",") {
			states = append(states, strings.ToLower(strings.TrimSpace(st)))
		}
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return badField("since", "must be an RFC 3339 time")
		}
		since = t
	}
	jc, err := s.jobsOn(r)
	if err != nil {
		return err
	}
	snap, err := jc.svc.Poller.Snapshot(r.Context(), jc.key, jc.slurm, jc.svc.Poller.Interval())
	if err != nil {
		return jobErr(err)
	}
	out := []*jobs.Job{}
	for _, j := range snap.Jobs {
		if len(states) > 0 && !slices.Contains(states, j.State) && !slices.Contains(states, strings.ToLower(j.SlurmState)) {
			continue
		}
		if n := q.Get("name"); n != "" && j.Name != n {
			continue
		}
		if !since.IsZero() && (j.SubmitTime == nil || j.SubmitTime.Before(since)) {
			continue
		}
		out = append(out, j)
	}
	// Finished jobs the controller has forgotten, from accounting (one sacct per such listing).
	if !since.IsZero() && jc.slurm.Sched.Accounting {
		acc, err := jc.slurm.Accounting(r.Context(), since)
		if err != nil {
			return jobErr(err)
		}
		for i := range acc {
			j := &acc[i]
			if _, ok := snap.Jobs[j.ID]; ok || j.User != jc.user {
				continue
			}
			if len(states) > 0 && !slices.Contains(states, j.State) && !slices.Contains(states, strings.ToLower(j.SlurmState)) {
				continue
			}
			if n := q.Get("name"); n != "" && j.Name != n {
				continue
			}
			j.Source = "accounting"
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *jobs.Job) int { return compareJobIDs(a.ID, b.ID) })
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out, "as_of": snap.At.UTC()})
	return nil
}

// compareJobIDs orders "12" < "12_3" < "12_10" < "13".
func compareJobIDs(a, b string) int {
	num := func(s string) (int, int) {
		j, t, _ := strings.Cut(s, "_")
		x, _ := strconv.Atoi(j)
		y, _ := strconv.Atoi(strings.Trim(t, "[]"))
		return x, y
	}
	ax, ay := num(a)
	bx, by := num(b)
	if ax != bx {
		return ax - bx
	}
	return ay - by
}

// getJob shows one job or array task; ?script=true adds its batch script; ?wait=running|finished
// long-polls (up to ?timeout= seconds) until the job gets there, answering with the job as it
// then is (X-Wait-Reached says whether it did).
func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	want := q.Get("wait")
	if want != "" && want != "running" && want != "finished" {
		return badField("wait", "must be running or finished")
	}
	jc, err := s.jobsOn(r)
	if err != nil {
		return err
	}
	var j *jobs.Job
	reached := ""
	if want != "" {
		maxWait := jc.svc.MaxWait()
		timeout, err := queryInt(r, "timeout", 30, 0, int(maxWait.Seconds()))
		if err != nil {
			return err
		}
		// The wait may outlast the server's write timeout: the answer's deadline is the wait's.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(timeout)*time.Second + s.cfg.StreamWriteTimeout))
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(timeout)*time.Second)
		j, err = jc.svc.Poller.Wait(ctx, jc.key, jc.slurm, jc.user, id, want)
		cancel()
		switch {
		case err == nil:
			reached = "true"
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			reached = "false"
			if j == nil { // no snapshot within the timeout (timeout=0): the job as it stands
				if j, err = jc.svc.Poller.Job(r.Context(), jc.key, jc.slurm, jc.user, id); err != nil {
					return jobErr(err)
				}
			}
		default:
			return jobErr(err)
		}
	} else if j, err = jc.svc.Poller.Job(r.Context(), jc.key, jc.slurm, jc.user, id); err != nil {
		return jobErr(err)
	}
	if q.Get("script") == "true" {
		sc, err := jc.slurm.Script(r.Context(), id)
		if err != nil {
			return jobErr(err)
		}
		j.Script = &sc
	}
	if reached != "" {
		w.Header().Set("X-Wait-Reached", reached)
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// jobAction returns the handler of DELETE (cancel), hold and release: the job must exist and be
// the caller's (scancel exits 0 on an unknown id, so this is checked first); 204.
func (s *Server) jobAction(action string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := jobID(r)
		if err != nil {
			return err
		}
		noteJob(r, id)
		jc, err := s.jobsOn(r)
		if err != nil {
			return err
		}
		switch action {
		case "cancel":
			err = jc.slurm.Cancel(r.Context(), jc.user, id)
		case "hold":
			err = jc.slurm.Hold(r.Context(), jc.user, id)
		case "release":
			err = jc.slurm.Release(r.Context(), jc.user, id)
		}
		if err != nil {
			return jobErr(err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// Output limits.
const (
	defaultTailBytes = 64 << 10
	maxTailBytes     = 16 << 20
)

// jobOutput answers with the end of the job's stdout or stderr (tail_bytes, default 64 KiB), or
// with follow=true streams it as NDJSON as the job writes it: {"type":"output","data":...}
// lines, then {"type":"end","job":{...}} once the job has finished and everything it wrote was
// sent.
func (s *Server) jobOutput(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	stream := q.Get("stream")
	if stream == "" {
		stream = "stdout"
	}
	if stream != "stdout" && stream != "stderr" {
		return badField("stream", "must be stdout or stderr")
	}
	tail, err := queryInt(r, "tail_bytes", defaultTailBytes, 0, maxTailBytes)
	if err != nil {
		return err
	}
	follow := q.Get("follow") == "true"
	jc, err := s.jobsOn(r)
	if err != nil {
		return err
	}
	j, err := jc.svc.Poller.Job(r.Context(), jc.key, jc.slurm, jc.user, id)
	if err != nil {
		return jobErr(err)
	}
	file := j.Stdout
	if stream == "stderr" {
		file = j.Stderr
	}
	if file == "" {
		return &httpError{status: http.StatusNotFound, detail: fmt.Sprintf("job %s has no %s file", id, stream)}
	}
	if !follow {
		var buf bytes.Buffer
		if err := jc.slurm.Tail(r.Context(), file, int64(tail), &limitBuffer{b: &buf, max: maxTailBytes}); err != nil {
			return jobErr(err)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Job-Output-Path", file)
		w.WriteHeader(http.StatusOK)
		_, err := w.Write(buf.Bytes())
		return err
	}
	release, err := s.limits.jobStreams.acquire(principal(r).User)
	if err != nil {
		return err
	}
	defer release()
	return s.followOutput(w, r, jc, j, file)
}

// limitBuffer keeps at most max bytes.
type limitBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitBuffer) Write(p []byte) (int, error) {
	if l.b.Len()+len(p) > l.max {
		return 0, errors.New("output exceeds the tail limit")
	}
	return l.b.Write(p)
}

// outputLine is one NDJSON line of a followed output.
type outputLine struct {
	Type     string    `json:"type"`
	Data     string    `json:"data,omitempty"`
	Encoding string    `json:"encoding,omitempty"`
	Job      *jobs.Job `json:"job,omitempty"`
	Error    *Problem  `json:"error,omitempty"`
}

// ndjsonOut turns bytes from a remote tail into NDJSON output lines (text when valid UTF-8,
// otherwise base64), counting them.
type ndjsonOut struct {
	mu   sync.Mutex
	enc  *json.Encoder
	dw   *deadlineWriter
	n    int64
	held []byte // an incomplete UTF-8 sequence at the end of the last chunk
}

func (o *ndjsonOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n += int64(len(p))
	chunk := append(o.held, p...)
	o.held = nil
	cut := len(chunk)
	for i := 1; i < utf8.UTFMax && i <= len(chunk); i++ {
		if utf8.RuneStart(chunk[len(chunk)-i]) {
			if !utf8.FullRune(chunk[len(chunk)-i:]) {
				cut = len(chunk) - i
			}
			break
		}
	}
	if cut < len(chunk) && utf8.Valid(chunk[:cut]) {
		o.held = append([]byte(nil), chunk[cut:]...)
		chunk = chunk[:cut]
	}
	if err := o.line(chunk); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (o *ndjsonOut) line(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	l := outputLine{Type: "output", Data: string(b)}
	if !utf8.Valid(b) {
		l.Data, l.Encoding = base64.StdEncoding.EncodeToString(b), "base64"
	}
	if err := o.enc.Encode(l); err != nil {
		return err
	}
	return o.dw.Flush()
}

func (o *ndjsonOut) flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.held
	o.held = nil
	return o.line(b)
}

// followOutput streams file from its start while the job runs, then what is left once it ends.
func (s *Server) followOutput(w http.ResponseWriter, r *http.Request, jc *jobCtx, j *jobs.Job, file string) error {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.Header().Set("X-Job-Output-Path", file)
	w.WriteHeader(http.StatusOK)
	dw := s.newDeadlineWriter(w, time.Time{})
	defer dw.done()
	enc := json.NewEncoder(dw)
	enc.SetEscapeHTML(false)
	out := &ndjsonOut{enc: enc, dw: dw}
	_ = dw.Flush()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	followed := make(chan error, 1)
	if !j.Finished {
		go func() { followed <- jc.slurm.Follow(ctx, file, 0, out) }()
		fin, err := jc.svc.Poller.Wait(ctx, jc.key, jc.slurm, jc.user, j.ID, "finished")
		cancel() // the job ended (or the client left): stop the tail, then read what is left
		<-followed
		if err != nil {
			if r.Context().Err() != nil || dw.Err() != nil {
				return nil
			}
			p := s.problemFor(r, jobErr(err))
			_ = enc.Encode(outputLine{Type: "error", Error: &p})
			return nil
		}
		j = fin
	}
	if err := jc.slurm.ReadFrom(r.Context(), file, out.n, out); err != nil && r.Context().Err() == nil {
		p := s.problemFor(r, jobErr(err))
		_ = enc.Encode(outputLine{Type: "error", Error: &p})
		return nil
	}
	_ = out.flush()
	_ = enc.Encode(outputLine{Type: "end", Job: j})
	_ = dw.Flush()
	return nil
}

// jobEvents streams the job's state changes as Server-Sent Events: "state" with the job on
// every change of state or reason, "unavailable" while the controller does not answer, "done"
// with the final job. It rides the shared poll: no command per client.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	jc, err := s.jobsOn(r)
	if err != nil {
		return err
	}
	j, err := jc.svc.Poller.Job(r.Context(), jc.key, jc.slurm, jc.user, id)
	if err != nil {
		return jobErr(err)
	}
	release, err := s.limits.jobStreams.acquire(principal(r).User)
	if err != nil {
		return err
	}
	defer release()
	watch, err := jc.svc.Poller.Watch(jc.key, jc.slurm)
	if err != nil {
		return jobErr(err)
	}
	defer watch.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	dw := s.newDeadlineWriter(w, time.Time{})
	defer dw.done()
	send := func(event string, v any) bool {
		b, _ := json.Marshal(v)
		_, err := fmt.Fprintf(dw, "event: %s\ndata: %s\n\n", event, b)
		return err == nil && dw.Flush() == nil
	}
	lastKey := ""
	emit := func(j *jobs.Job) bool {
		if j.Finished {
			send("done", j)
			return false
		}
		if k := j.State + "\x00" + j.Reason; k != lastKey {
			lastKey = k
			return send("state", j)
		}
		return true
	}
	if !emit(j) {
		return nil
	}
	keep := time.NewTicker(sseKeepalive)
	defer keep.Stop()
	down := false
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-keep.C:
			if _, err := fmt.Fprint(dw, ": keepalive\n\n"); err != nil || dw.Flush() != nil {
				return nil
			}
		case snap := <-watch.C():
			if snap.Err != nil {
				if errors.Is(snap.Err, jobs.ErrRevoked) {
					send("error", s.problemFor(r, jobErr(snap.Err)))
					return nil
				}
				if !down && errors.Is(snap.Err, jobs.ErrUnavailable) {
					down = true
					if !send("unavailable", map[string]string{"detail": snap.Err.Error()}) {
						return nil
					}
				}
				continue
			}
			down = false
			next, ok := snap.Jobs[id]
			if !ok || next.Finished {
				full, err := jc.svc.Poller.Job(r.Context(), jc.key, jc.slurm, jc.user, id)
				if err != nil {
					if errors.Is(err, jobs.ErrUnavailable) {
						continue
					}
					p := s.problemFor(r, jobErr(err))
					send("error", p)
					return nil
				}
				next = full
			}
			if !emit(next) {
				return nil
			}
		}
	}
}
