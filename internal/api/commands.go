package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sshapi/sshapi/internal/command"
)

type commandRequest struct {
	Command        string  `json:"command"`
	TimeoutS       float64 `json:"timeout_s"`
	Stdin          *string `json:"stdin"`
	MaxOutputBytes int64   `json:"max_output_bytes"`
}

func (c commandRequest) validate(maxOutput int64) (command.Request, error) {
	if strings.TrimSpace(c.Command) == "" {
		return command.Request{}, badField("command", "is required")
	}
	if len(c.Command) > 128<<10 {
		return command.Request{}, badField("command", "must be at most 128 KiB")
	}
	if strings.ContainsRune(c.Command, 0) {
		return command.Request{}, badField("command", "must not contain NUL bytes")
	}
	timeout := time.Duration(c.TimeoutS * float64(time.Second))
	if c.TimeoutS < 0 || timeout > command.MaxTimeout {
		return command.Request{}, badField("timeout_s", "must be between 0 and %d seconds", int(command.MaxTimeout.Seconds()))
	}
	if c.MaxOutputBytes < 0 || c.MaxOutputBytes > maxOutput {
		return command.Request{}, badField("max_output_bytes", "must be between 0 and %d (the server's command_max_output_bytes)", maxOutput)
	}
	if timeout <= 0 {
		timeout = command.DefaultTimeout
	}
	maxOut := c.MaxOutputBytes
	if maxOut == 0 {
		maxOut = min(command.DefaultMaxOutput, maxOutput)
	}
	req := command.Request{Command: c.Command, Timeout: timeout, MaxOutput: maxOut}
	if c.Stdin != nil {
		req.Stdin = []byte(*c.Stdin)
	}
	return req, nil
}

func wantsNDJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")
}

// runCommandOn returns the handler that runs the JSON command body on the caller's system named
// by path parameter param ("id" on /v1, "name" on the study's route).
func (s *Server) runCommandOn(param string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		release, err := s.limits.commands.acquire(principal(r).User)
		if err != nil {
			return err
		}
		defer release()
		var body commandRequest
		if err := decodeJSON(r, &body); err != nil {
			return err
		}
		req, err := body.validate(s.cfg.CommandMaxOutputBytes)
		if err != nil {
			return err
		}
		return s.execute(w, r, principal(r).User, r.PathValue(param), req)
	}
}

// maxStreamGrace bounds how long after a command's timeout its NDJSON stream may still be
// written (the kill, the final "exit" event and output already on its way to a slow client);
// the grace is the smaller of this and StreamWriteTimeout.
const maxStreamGrace = 30 * time.Second

// runBuffered reserves the command's output from the server-wide budget (waiting at most
// BudgetWait) and runs it, keeping the output.
func (s *Server) runBuffered(ctx context.Context, owner, id string, req command.Request) (*command.Output, error) {
	t, _, err := s.target(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	wctx, cancel := s.budgetCtx(ctx)
	res, err := s.outputs.Reserve(wctx, owner, 2*req.MaxOutput)
	cancel()
	if err != nil {
		return nil, errBusy("command output budget", err)
	}
	return command.RunBuffered(ctx, s.deps.Pool, t, req, res)
}

// execute runs req on the caller's system and answers with the result, or streams it as NDJSON.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, owner, id string, req command.Request) error {
	if !wantsNDJSON(r) {
		out, err := s.runBuffered(r.Context(), owner, id, req)
		if err != nil {
			return err
		}
		defer out.Release()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		dw := s.newDeadlineWriter(w, time.Time{})
		defer dw.done()
		if err := out.WriteJSON(dw); err != nil {
			return err
		}
		_, err = io.WriteString(dw, "\n")
		return err
	}
	t, _, err := s.target(r.Context(), owner, id)
	if err != nil {
		return err
	}
	// Streaming: headers go out with the first event, so an error before it is still a problem.
	// Each event is written under a deadline: a client that stops reading ends the command
	// once its timeout has passed (or after StreamWriteTimeout without progress).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	dw := s.newDeadlineWriter(w, time.Now().Add(req.Timeout+min(maxStreamGrace, s.cfg.StreamWriteTimeout)))
	defer dw.done()
	enc := json.NewEncoder(dw)
	enc.SetEscapeHTML(false)
	started := false
	start := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
	}
	_, err = command.Run(ctx, s.deps.Pool, t, req, func(e command.Event) {
		start()
		if enc.Encode(e) != nil || dw.Flush() != nil {
			cancel() // the client is gone or stalled: kill the command, free the channel
		}
	})
	if werr := dw.Err(); werr != nil && started {
		return fmt.Errorf("NDJSON stream abandoned by the client: %w", werr)
	}
	if err != nil && started {
		// Too late for a status code: the last line says what went wrong.
		p := s.problemFor(r, err)
		_ = enc.Encode(map[string]any{"type": "error", "error": p})
		return nil
	}
	return err
}

type multiCommandRequest struct {
	Systems []string `json:"systems"`
	commandRequest
}

// runMany runs one command on many systems at once (parallel-ssh's job). The buffered answer
// lists one result per system in the order given; with Accept: application/x-ndjson each
// system's line is sent as soon as it finishes. Every system's output is reserved from the
// server-wide budget while it is held.
func (s *Server) runMany(w http.ResponseWriter, r *http.Request) error {
	release, err := s.limits.commands.acquire(principal(r).User)
	if err != nil {
		return err
	}
	defer release()
	var body multiCommandRequest
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	if len(body.Systems) == 0 {
		return badField("systems", "is required: a list of system ids")
	}
	if len(body.Systems) > 1000 {
		return badField("systems", "at most 1000 systems per request")
	}
	seen := map[string]bool{}
	for i, id := range body.Systems {
		if seen[id] {
			return badField("systems", "entry %d (%q) is repeated", i, id)
		}
		seen[id] = true
	}
	req, err := body.validate(s.cfg.CommandMaxOutputBytes)
	if err != nil {
		return err
	}
	owner := principal(r).User
	noteFanout(r, body.Systems)
	stream := wantsNDJSON(r)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	dw := s.newDeadlineWriter(w, time.Time{})
	defer dw.done()
	if stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Accel-Buffering", "no")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(http.StatusOK)

	outs := make([]*command.Output, len(body.Systems))
	errs := make([]*Problem, len(body.Systems))
	defer func() {
		for _, o := range outs {
			if o != nil {
				o.Release()
			}
		}
	}()
	var mu sync.Mutex // serializes NDJSON lines
	sem := make(chan struct{}, s.cfg.MaxFanout)
	var wg sync.WaitGroup
	for i, id := range body.Systems {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out, err := s.runBuffered(ctx, owner, id, req)
			var p *Problem
			if err != nil {
				pp := s.problemFor(r, err)
				p = &pp
			}
			if !stream {
				outs[i], errs[i] = out, p
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if werr := writeMultiLine(dw, id, out, p); werr != nil || dw.Flush() != nil {
				cancel()
			}
			if out != nil {
				out.Release()
			}
		}()
	}
	wg.Wait()
	if werr := dw.Err(); werr != nil {
		return fmt.Errorf("fan-out response abandoned by the client: %w", werr)
	}
	if stream {
		return nil
	}
	_, _ = io.WriteString(dw, `{"results":[`)
	for i, id := range body.Systems {
		if i > 0 {
			_, _ = io.WriteString(dw, ",")
		}
		p := errs[i]
		if outs[i] == nil && p == nil { // not started: the client went away
			pp := s.problemFor(r, context.Canceled)
			p = &pp
		}
		if err := writeMultiLine(dw, id, outs[i], p); err != nil {
			return fmt.Errorf("fan-out response abandoned by the client: %w", err)
		}
		if outs[i] != nil {
			outs[i].Release()
			outs[i] = nil
		}
	}
	_, err = io.WriteString(dw, "]}\n")
	return err
}

// writeMultiLine writes one system's {"system":..., "result"|"error":...} object and a newline.
func writeMultiLine(w io.Writer, id string, out *command.Output, p *Problem) error {
	name, _ := json.Marshal(id) // a string: cannot fail
	if _, err := io.WriteString(w, `{"system":`+string(name)); err != nil {
		return err
	}
	if out != nil {
		if _, err := io.WriteString(w, `,"result":`); err != nil {
			return err
		}
		if err := out.WriteJSON(w); err != nil {
			return err
		}
		_, err := io.WriteString(w, "}\n")
		return err
	}
	b, _ := json.Marshal(p) // a Problem: cannot fail
	_, err := io.WriteString(w, `,"error":`+string(b)+"}\n")
	return err
}
