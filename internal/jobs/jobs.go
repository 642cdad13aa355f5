// Package jobs submits, watches and cancels batch jobs through a scheduler's own commands run
// over SSH (Slurm: sbatch, squeue, scontrol, scancel), as the credential's remote user.
//
// Every command line is built from quoted words (internal/shell): no field of a request reaches
// the remote shell unquoted. Output is parsed from format strings that work from Slurm 22.05
// (Debian 12, where `squeue --json` ignores its filters and `scontrol --json` does not exist) to
// current releases: `squeue -O` with a unit-separator suffix after every field and
// `scontrol show -o job`. Outcomes are decided by exit codes and fields. Where a command's exit
// status cannot tell two outcomes apart, `scontrol ping` (exit 0 when the controller answers)
// does: a failed command with a live controller is the request's fault (400/404), with a dead
// one the cluster's (503). Slurm's own words are read in exactly these places, because Slurm
// gives nothing else:
//   - sbatch's refusal names no field: the problem's field is guessed from its message
//     (partition, account, qos, time, dependency, array), and the message is passed on.
//   - a job record's State may carry text after the state word ("CANCELLED by 1001"): only the
//     first word is read.
//
// Shared polling (Poller): however many clients watch jobs of one credential, one squeue runs
// per credential per interval and its result is fanned out to every watcher.
//
// # Concurrency: access that ends while someone watches
//
// A request is decided once, when it starts; a wait, an event stream or a followed output then
// lasts as long as the job, on the shared feed of its credential. So the feed decides again
// before every squeue (Slurm.Allowed: one store read of the system, its credential and the
// operator's switches). When that refuses (the owner deleted the system or its credential, or
// an operator disabled the owner or the system), the feed is removed and ends, under the
// Poller's lock and then its own, in one step: every waiter and watcher gets the refusal
// (ErrRevoked) as its last snapshot, and a request that finds the feed ended afterwards asks
// for a new one, which decides for itself. Nothing runs as the remote account after the
// refusal: the feed stops polling, and a followed output's tail ends with its wait. What a
// watcher can still be handed is the last snapshot from before the refusal, at most one
// interval old (and on another instance the operator's switch takes access.Config's
// DisabledCacheTTL to be seen).
package jobs

import (
	"errors"
	"fmt"
	"time"
)

// Errors callers map to HTTP statuses.
var (
	// ErrNotFound: no such job (or its record has left the controller).
	ErrNotFound = errors.New("job not found")
	// ErrForbidden: the job belongs to another remote user.
	ErrForbidden = errors.New("job belongs to another user")
	// ErrUnavailable: the scheduler's controller does not answer; retry later.
	ErrUnavailable = errors.New("scheduler controller unavailable")
	// ErrRevoked: the caller's access to the scheduler ended while it watched (Slurm.Allowed
	// refused); the error also wraps the refusal itself.
	ErrRevoked = errors.New("access to the scheduler ended")
)

// FieldError is a request field the scheduler (or validation) refused.
type FieldError struct {
	Field, Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, a ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, a...)}
}

// Normalised job states. Slurm's own state is kept in Job.SlurmState.
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateSuspended = "suspended"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
	StateTimeout   = "timeout"
	StateUnknown   = "unknown"
)

// Job is one job (or one task of an array job) as the API shows it.
type Job struct {
	// ID is "123", or "123_4" for task 4 of array job 123.
	ID          string `json:"job_id"`
	ArrayJobID  string `json:"array_job_id,omitempty"`
	ArrayTaskID string `json:"array_task_id,omitempty"`
	Name        string `json:"name"`
	User        string `json:"user"`
	// State is normalised (pending, running, suspended, completed, failed, cancelled, timeout);
	// SlurmState is the scheduler's word for it.
	State      string `json:"state"`
	SlurmState string `json:"slurm_state"`
	Reason     string `json:"reason,omitempty"`
	Held       bool   `json:"held"`
	Finished   bool   `json:"finished"`
	// ExitCode and Signal are known once the job has finished.
	ExitCode   *int       `json:"exit_code,omitempty"`
	Signal     *int       `json:"signal,omitempty"`
	Partition  string     `json:"partition,omitempty"`
	Account    string     `json:"account,omitempty"`
	QOS        string     `json:"qos,omitempty"`
	SubmitTime *time.Time `json:"submit_time,omitempty"`
	StartTime  *time.Time `json:"start_time,omitempty"`
	EndTime    *time.Time `json:"end_time,omitempty"`
	TimeLimit  string     `json:"time_limit,omitempty"`
	Nodes      int        `json:"nodes,omitempty"`
	CPUs       int        `json:"cpus,omitempty"`
	NodeList   string     `json:"node_list,omitempty"`
	WorkDir    string     `json:"working_dir,omitempty"`
	// Stdout and Stderr are the resolved paths of the job's output files.
	Stdout     string `json:"stdout,omitempty"`
	Stderr     string `json:"stderr,omitempty"`
	Dependency string `json:"dependency,omitempty"`
	// Script is the batch script, when asked for.
	Script *string `json:"script,omitempty"`
	// Efficiency is what a finished job used of what it was given (accounting only).
	Efficiency *Efficiency `json:"efficiency,omitempty"`
	// Source is "accounting" for a job the controller no longer holds, read from sacct.
	Source string `json:"source,omitempty"`

	// rawID is Slurm's own job id of the record (an array task's is not its array's): %j.
	rawID string
}

// normalise maps a Slurm state word to a normalised state and whether the job has ended.
func normalise(slurm string) (state string, finished bool) {
	switch slurm {
	case "PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING":
		return StatePending, false
	case "RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING":
		return StateRunning, false
	case "SUSPENDED", "STOPPED":
		return StateSuspended, false
	case "COMPLETED":
		return StateCompleted, true
	case "CANCELLED", "REVOKED":
		return StateCancelled, true
	case "TIMEOUT", "DEADLINE":
		return StateTimeout, true
	case "FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "SPECIAL_EXIT":
		return StateFailed, true
	}
	return StateUnknown, false
}

// Reached reports whether j has reached the wanted point: "running" (started, or already
// ended) or "finished".
func (j *Job) Reached(want string) bool {
	switch want {
	case "finished":
		return j.Finished
	case "running":
		return j.Finished || j.State == StateRunning || j.State == StateSuspended
	}
	return false
}
