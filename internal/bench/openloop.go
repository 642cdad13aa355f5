package bench

import "github.com/sshapi/sshapi/internal/openloop"

// The open-loop engine, its summaries and error kinds live in package openloop, which the
// service's load route uses without the rest of the bench harness; these names keep the
// harness's code and reports unchanged.
type (
	// Op is openloop.Op.
	Op = openloop.Op
	// Plan is openloop.Plan.
	Plan = openloop.Plan
	// Progress is openloop.Progress.
	Progress = openloop.Progress
	// Recorder is openloop.Recorder.
	Recorder = openloop.Recorder
	// Stats is openloop.Stats.
	Stats = openloop.Stats
	// Point is openloop.Point.
	Point = openloop.Point
	// Summary is openloop.Summary.
	Summary = openloop.Summary
	// StatusError is openloop.StatusError.
	StatusError = openloop.StatusError
	// ExitError is openloop.ExitError.
	ExitError = openloop.ExitError
	// KindError is openloop.KindError.
	KindError = openloop.KindError
	// Kinder is openloop.Kinder.
	Kinder = openloop.Kinder
)

// ErrNotSent is openloop.ErrNotSent.
var ErrNotSent = openloop.ErrNotSent

// Run is openloop.Run.
var Run = openloop.Run

// Burst is openloop.Burst.
var Burst = openloop.Burst

// NewRecorder is openloop.NewRecorder.
var NewRecorder = openloop.NewRecorder

// Classify is openloop.Classify.
var Classify = openloop.Classify

// truncate is openloop.Truncate.
var truncate = openloop.Truncate
