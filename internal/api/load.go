package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/openloop"
	"github.com/sshapi/sshapi/internal/slot"
	"github.com/sshapi/sshapi/internal/sshpool"
)

// Limits of POST /sshapi/v2/load: one request may keep the server busy for at most
// maxLoadDuration plus loadDrain, with at most loadMaxInFlight commands outstanding.
const (
	maxLoadRate      = 1000
	maxLoadDurationS = 60
	loadMaxInFlight  = 256
	loadDrain        = 10 * time.Second
	loadTimeout      = 30 * time.Second
	// maxConcurrentLoads bounds load runs across all users: each can keep 256 commands in flight.
	maxConcurrentLoads = 2
)

type loadRequest struct {
	Name      string  `json:"name"`
	Command   string  `json:"command"`
	Rate      float64 `json:"rate"`
	DurationS float64 `json:"duration_s"`
}

// paperLoad runs a bounded open-loop load of one command against one of the caller's named
// credentials from inside the server (the bench engine calling command.Run on the pool, no
// HTTP hop) and answers with the run's summary: achieved rate, latency percentiles measured
// from each command's scheduled start, and errors by kind.
func (s *Server) paperLoad(w http.ResponseWriter, r *http.Request) error {
	var body loadRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	if strings.TrimSpace(body.Name) == "" {
		return badField("name", "is required: the named credential to load")
	}
	req, err := commandRequest{Command: body.Command}.validate(s.cfg.CommandMaxOutputBytes)
	if err != nil {
		return err
	}
	if !(body.Rate > 0 && body.Rate <= maxLoadRate) || math.IsNaN(body.Rate) {
		return badField("rate", "must be more than 0 and at most %d requests per second", maxLoadRate)
	}
	if !(body.DurationS > 0 && body.DurationS <= maxLoadDurationS) {
		return badField("duration_s", "must be more than 0 and at most %d seconds", maxLoadDurationS)
	}
	duration := time.Duration(body.DurationS * float64(time.Second))
	if body.Rate*duration.Seconds() < 1 {
		return badField("rate", "rate × duration_s must schedule at least one command")
	}
	req.Timeout = loadTimeout
	req.MaxOutput = 4 << 10 // only the exit status counts: keep little of each of 256 outputs in flight
	lease, err := s.loads.TryAcquire(principal(r).User, 1)
	switch {
	case errors.Is(err, slot.ErrShare):
		return &httpError{status: http.StatusTooManyRequests, retryAfter: maxLoadDurationS,
			detail: fmt.Sprintf("you already have %d load runs in progress (the limit per user); try again when one has finished", s.loads.Share())}
	case err != nil:
		return &httpError{status: http.StatusTooManyRequests, retryAfter: maxLoadDurationS,
			detail: fmt.Sprintf("%d load runs are already in progress on this server; try again later", maxConcurrentLoads)}
	}
	defer lease.Release()
	t, _, err := s.target(r.Context(), principal(r).User, body.Name)
	if err != nil {
		return err
	}
	op := func(ctx context.Context) error {
		res, err := command.Run(ctx, s.deps.Pool, t, req, nil)
		if err != nil {
			return loadError(err)
		}
		switch {
		case res.TimedOut:
			return &openloop.KindError{K: "timeout", Msg: "the command ran longer than its timeout and was killed"}
		case res.ExitStatus == nil:
			return &openloop.ExitError{Status: -1}
		case *res.ExitStatus != 0:
			return &openloop.ExitError{Status: *res.ExitStatus}
		}
		return nil
	}
	detail := fmt.Sprintf("%g/s for %gs: %s", body.Rate, duration.Seconds(), body.Command)
	if len(detail) > 200 {
		detail = detail[:200] + "…"
	}
	if err := s.audit(r, "load.run", body.Name, detail); err != nil {
		return err
	}
	plan := openloop.Plan{Rate: body.Rate, Duration: duration, MaxInFlight: loadMaxInFlight, Timeout: loadTimeout + 5*time.Second, Drain: loadDrain}
	rec, err := openloop.Run(r.Context(), plan, op)
	if err != nil {
		return err // the caller went away
	}
	sum := rec.Summary()
	sum.Target, sum.Scenario, sum.Command, sum.Rate, sum.DurationS = "sshapi (in server)", openloop.ScenarioLoad, body.Command, body.Rate, duration.Seconds()
	writeJSON(w, http.StatusOK, sum)
	return nil
}

// loadError gives a failed command an error kind named after the pool's failure.
func loadError(err error) error {
	kind := ""
	switch {
	case errors.Is(err, sshpool.ErrAuth):
		kind = "ssh: authentication failed"
	case errors.Is(err, sshpool.ErrHostKey):
		kind = "ssh: host key"
	case errors.Is(err, sshpool.ErrUnavailable):
		kind = "ssh: no channel before the deadline"
	case errors.Is(err, sshpool.ErrConnLost):
		kind = "ssh: connection lost"
	case errors.Is(err, sshpool.ErrClosed):
		kind = "ssh: pool closed"
	case errors.Is(err, context.DeadlineExceeded):
		kind = "timeout"
	default:
		return err
	}
	return &openloop.KindError{K: kind, Msg: err.Error()}
}
