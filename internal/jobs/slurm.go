package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sshapi/sshapi/internal/shell"
)

// Runner runs one command line on the system; command.Exec implements it. The exit status is
// a result; err means the command could not run or its outcome is unknown.
type Runner interface {
	Run(ctx context.Context, command string, stdin io.Reader, stdout, stderr io.Writer) (int, error)
}

// Scheduler is how one system's scheduler is reached: where its commands are, the environment
// they need and the cluster they address.
type Scheduler struct {
	// BinDir holds sbatch, squeue, scontrol and scancel; empty means the login shell's PATH.
	BinDir string `yaml:"bin_dir" env:"BIN_DIR" json:"bin_dir,omitempty"`
	// Env is set for every scheduler command (e.g. SLURM_CONF).
	Env map[string]string `yaml:"env" env:"ENV" json:"env,omitempty"`
	// Cluster, if set, is passed as --clusters (Slurm multi-cluster setups).
	Cluster string `yaml:"cluster" env:"CLUSTER" json:"cluster,omitempty"`
	// Accounting says the cluster runs slurmdbd: finished jobs the controller has forgotten
	// are read from sacct, and finished jobs show their efficiency.
	Accounting bool `yaml:"accounting" env:"ACCOUNTING" json:"accounting,omitempty"`
}

// Limits on what a command's output and a request may hold.
const (
	// MaxScriptBytes bounds a submitted script.
	MaxScriptBytes = 512 << 10
	// maxListBytes bounds squeue's output kept in memory (about 10,000 jobs).
	maxListBytes = 8 << 20
	// maxSmallBytes bounds other commands' output.
	maxSmallBytes = 1 << 20
)

// Slurm runs Slurm's commands through a Runner as the credential's remote user.
type Slurm struct {
	Run   Runner
	Sched Scheduler
	// Owner is the sshapi user the scheduler is reached for: a Poller bounds each owner's
	// feeds and watchers (PollerConfig.MaxKeysPerOwner, MaxWatchersPerOwner).
	Owner string
	// Allowed, when set, decides afresh whether the caller may still reach the scheduler this
	// way (the system, its credential and the operator's switches as they are now). A Poller
	// asks it before every shared poll; an error ends the credential's feed and every watcher
	// of it (see Poller).
	Allowed func(ctx context.Context) error
}

// command builds the quoted command line: env LC_ALL=C TZ=UTC [Sched.Env] [extra] <bin> args.
func (s *Slurm) command(extraEnv map[string]string, name string, args ...string) string {
	argv := []string{"TZ=UTC"}
	for _, m := range []map[string]string{s.Sched.Env, extraEnv} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			argv = append(argv, k+"="+m[k])
		}
	}
	bin := name
	if s.Sched.BinDir != "" {
		bin = path.Join(s.Sched.BinDir, name)
	}
	argv = append(argv, bin)
	if s.Sched.Cluster != "" {
		argv = append(argv, "--clusters="+s.Sched.Cluster)
	}
	return shell.Command(append(argv, args...)...)
}

// result is one finished command.
type result struct {
	code           int
	stdout, stderr string
}

// capWriter keeps at most max bytes and notes that more came.
type capWriter struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); len(p) > room {
		w.buf.Write(p[:max(room, 0)])
		w.over = true
		return len(p), nil
	}
	return w.buf.Write(p)
}

// exec runs a command line and keeps up to limit bytes of stdout.
func (s *Slurm) exec(ctx context.Context, line string, stdin io.Reader, limit int) (*result, error) {
	out, errw := &capWriter{max: limit}, &capWriter{max: 64 << 10}
	code, err := s.Run.Run(ctx, line, stdin, out, errw)
	if err != nil {
		return nil, fmt.Errorf("scheduler command: %w", err)
	}
	if out.over {
		return nil, fmt.Errorf("scheduler command output exceeds %d bytes", limit)
	}
	return &result{code: code, stdout: out.buf.String(), stderr: strings.TrimSpace(errw.buf.String())}, nil
}

// Ping reports whether the controller answers (`scontrol ping` exits 0 only then).
func (s *Slurm) Ping(ctx context.Context) error {
	r, err := s.exec(ctx, s.command(nil, "scontrol", "ping"), nil, maxSmallBytes)
	if err != nil {
		return err
	}
	if r.code == 127 {
		return fmt.Errorf("%w: scontrol not found (set the system's scheduler bin_dir)", ErrUnavailable)
	}
	if r.code != 0 {
		return fmt.Errorf("%w: %s", ErrUnavailable, firstLine(r.stdout+"\n"+r.stderr))
	}
	return nil
}

// failed explains a non-zero exit: ErrUnavailable when the controller is down, otherwise
// onUp's error (the request's fault).
func (s *Slurm) failed(ctx context.Context, r *result, onUp func() error) error {
	if r.code == 127 {
		return fmt.Errorf("%w: scheduler command not found (set the system's scheduler bin_dir): %s", ErrUnavailable, r.stderr)
	}
	if err := s.Ping(ctx); err != nil {
		return err
	}
	return onUp()
}

// ValidJobID reports whether id is a job id ("123") or an array task ("123_4").
func ValidJobID(id string) bool { return jobIDRE.MatchString(id) }

var jobIDRE = regexp.MustCompile(`^[1-9][0-9]{0,9}(_[0-9]{1,9})?$`)

// List returns the user's jobs that the controller still holds (pending, running and recently
// finished), one entry per array task.
func (s *Slurm) List(ctx context.Context) ([]Job, error) {
	r, err := s.exec(ctx, s.command(nil, "squeue", "--me", "-h", "-r", "-t", "all", "-O", squeueFormat()), nil, maxListBytes)
	if err != nil {
		return nil, err
	}
	if r.code != 0 {
		return nil, s.failed(ctx, r, func() error { return fmt.Errorf("squeue exited %d: %s", r.code, r.stderr) })
	}
	return parseSqueue(r.stdout)
}

// Get returns one job or array task from `scontrol show -o job`, with resolved output paths
// and (for a finished job) its exit code. A job of another user is ErrForbidden; an unknown id
// ErrNotFound. An array job's id ("123") returns its first record.
func (s *Slurm) Get(ctx context.Context, user, id string) (*Job, error) {
	if !ValidJobID(id) {
		return nil, fieldErr("job_id", "%q is not a job id (123, or 123_4 for an array task)", id)
	}
	r, err := s.exec(ctx, s.command(nil, "scontrol", "show", "-o", "job", id), nil, maxSmallBytes)
	if err != nil {
		return nil, err
	}
	if r.code != 0 {
		// scontrol exits 1 for an unknown id and for a dead controller alike: ping decides.
		return nil, s.failed(ctx, r, func() error { return fmt.Errorf("%w: %s", ErrNotFound, id) })
	}
	jobs, err := parseScontrol(r.stdout)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	j := &jobs[0]
	for i := range jobs {
		if jobs[i].ID == id {
			j = &jobs[i]
		}
	}
	if user != "" && j.User != user {
		return nil, fmt.Errorf("%w: job %s", ErrForbidden, id)
	}
	return j, nil
}

// Script returns a job's batch script (`scontrol write batch_script ID -`).
func (s *Slurm) Script(ctx context.Context, id string) (string, error) {
	r, err := s.exec(ctx, s.command(nil, "scontrol", "write", "batch_script", id, "-"), nil, MaxScriptBytes+4096)
	if err != nil {
		return "", err
	}
	if r.code != 0 {
		return "", s.failed(ctx, r, func() error { return fmt.Errorf("%w: no batch script for %s", ErrNotFound, id) })
	}
	return r.stdout, nil
}

// control runs an action on the user's own job after checking it exists and is theirs (scancel
// exits 0 on an unknown id, so the check comes first).
func (s *Slurm) control(ctx context.Context, user, id string, argv ...string) error {
	if _, err := s.Get(ctx, user, id); err != nil {
		return err
	}
	r, err := s.exec(ctx, s.command(nil, argv[0], argv[1:]...), nil, maxSmallBytes)
	if err != nil {
		return err
	}
	if r.code != 0 {
		return s.failed(ctx, r, func() error {
			return &FieldError{Field: "job_id", Message: fmt.Sprintf("%s refused: %s", argv[0], firstLine(r.stderr))}
		})
	}
	return nil
}

// Cancel cancels the user's job or array task.
func (s *Slurm) Cancel(ctx context.Context, user, id string) error {
	return s.control(ctx, user, id, "scancel", id)
}

// Hold holds the user's pending job.
func (s *Slurm) Hold(ctx context.Context, user, id string) error {
	return s.control(ctx, user, id, "scontrol", "hold", id)
}

// Release releases the user's held job.
func (s *Slurm) Release(ctx context.Context, user, id string) error {
	return s.control(ctx, user, id, "scontrol", "release", id)
}

// sbatchMessageFields maps words of sbatch's refusal to the request field it is about (see the
// package doc: sbatch names no field otherwise).
var sbatchMessageFields = []struct{ word, field string }{
	{"partition", "partition"}, {"account", "account"}, {"qos", "qos"}, {"time limit", "time_limit"},
	{"dependency", "dependency"}, {"array", "array"}, {"memory", "memory"}, {"gres", "gpus"},
	{"node count", "nodes"}, {"cpu count", "cpus_per_task"}, {"working directory", "working_dir"},
	{"chdir", "working_dir"},
}

// Exit statuses the submit command line uses for its own checks.
const (
	exitScriptUnreadable = 97
	exitWorkDirMissing   = 98
)

// Submit runs sbatch for spec and returns the new job's id. The script goes on sbatch's
// standard input (or sbatch reads ScriptPath); every option is one quoted word.
func (s *Slurm) Submit(ctx context.Context, spec *Spec) (string, error) {
	args, err := spec.args()
	if err != nil {
		return "", err
	}
	var checks []string
	if spec.ScriptPath != "" {
		// Two tests, not one with -a: test(1) with five arguments takes a path such as "=" for
		// its operator. (a && b || c reads (a && b) || c in sh, fish and csh alike.)
		checks = append(checks, "test -f "+shell.Quote(spec.ScriptPath)+" && test -r "+shell.Quote(spec.ScriptPath)+" || exit "+strconv.Itoa(exitScriptUnreadable))
	}
	if spec.WorkingDir != "" {
		checks = append(checks, "test -d "+shell.Quote(spec.WorkingDir)+" || exit "+strconv.Itoa(exitWorkDirMissing))
	}
	line := s.command(spec.Env, "sbatch", args...)
	if len(checks) > 0 {
		line = strings.Join(checks, "; ") + "; " + line
	}
	var stdin io.Reader
	if spec.ScriptPath == "" {
		stdin = strings.NewReader(spec.Script)
	}
	r, err := s.exec(ctx, line, stdin, maxSmallBytes)
	if err != nil {
		return "", err
	}
	switch {
	case r.code == exitScriptUnreadable:
		return "", fieldErr("script_path", "%q is not a readable file for the remote user", spec.ScriptPath)
	case r.code == exitWorkDirMissing:
		return "", fieldErr("working_dir", "%q is not a directory the remote user can reach", spec.WorkingDir)
	case r.code != 0:
		return "", s.failed(ctx, r, func() error {
			msg := firstLine(lastErrorLine(r.stderr))
			low := strings.ToLower(msg)
			field := "script"
			if spec.ScriptPath != "" {
				field = "script_path"
			}
			for _, m := range sbatchMessageFields {
				if strings.Contains(low, m.word) {
					field = m.field
					break
				}
			}
			return fieldErr(field, "sbatch refused the job: %s", msg)
		})
	}
	// --parsable prints "id" or "id;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(lastLine(r.stdout)), ";")
	if !ValidJobID(id) {
		return "", fmt.Errorf("sbatch printed no job id: %q", firstLine(r.stdout))
	}
	return id, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// lastErrorLine picks sbatch's final "error:" line (the submission failure), or the last line.
func lastErrorLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "error:") {
			_, msg, _ := strings.Cut(lines[i], "error: ")
			return strings.TrimPrefix(msg, "Batch job submission failed: ")
		}
	}
	return lastLine(s)
}

// Tail writes up to n bytes of the end of a job's output file to w (`tail -c`); a missing file
// is ErrNotFound.
func (s *Slurm) Tail(ctx context.Context, file string, n int64, w io.Writer) error {
	errw := &capWriter{max: 4096}
	code, err := s.Run.Run(ctx, shell.Command("tail", "-c", strconv.FormatInt(n, 10), "--", file), nil, w, errw)
	if err != nil {
		return fmt.Errorf("tail %s: %w", file, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: output file %s cannot be read: %s", ErrNotFound, file, firstLine(errw.buf.String()))
	}
	return nil
}

// Follow writes a job's output file to w from byte offset from on, as it grows (`tail -F`),
// until ctx ends. A file that does not exist yet is waited for.
func (s *Slurm) Follow(ctx context.Context, file string, from int64, w io.Writer) error {
	_, err := s.Run.Run(ctx, shell.Command("tail", "-c", "+"+strconv.FormatInt(from+1, 10), "-F", "--", file), nil, w, io.Discard)
	if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return fmt.Errorf("follow %s: %w", file, err)
	}
	return nil
}

// ReadFrom writes a job's output file from byte offset from to its current end to w
// (`tail -c +N`); a missing file is ErrNotFound.
func (s *Slurm) ReadFrom(ctx context.Context, file string, from int64, w io.Writer) error {
	errw := &capWriter{max: 4096}
	code, err := s.Run.Run(ctx, shell.Command("tail", "-c", "+"+strconv.FormatInt(from+1, 10), "--", file), nil, w, errw)
	if err != nil {
		return fmt.Errorf("read %s: %w", file, err)
	}
	if code != 0 {
		return fmt.Errorf("%w: output file %s cannot be read: %s", ErrNotFound, file, firstLine(errw.buf.String()))
	}
	return nil
}
