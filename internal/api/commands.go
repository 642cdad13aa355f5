package api

import (
	"encoding/json"
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

func (c commandRequest) validate() (command.Request, error) {
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
	if c.MaxOutputBytes < 0 || c.MaxOutputBytes > command.MaxMaxOutput {
		return command.Request{}, badField("max_output_bytes", "must be between 0 and %d", command.MaxMaxOutput)
	}
	req := command.Request{Command: c.Command, Timeout: timeout, MaxOutput: c.MaxOutputBytes}
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
		req, err := body.validate()
		if err != nil {
			return err
		}
		return s.execute(w, r, principal(r).User, r.PathValue(param), req)
	}
}

// execute runs req on the caller's system and answers with the result, or streams it as NDJSON.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, owner, id string, req command.Request) error {
	t, _, err := s.target(r.Context(), owner, id)
	if err != nil {
		return err
	}
	if !wantsNDJSON(r) {
		res, err := command.Run(r.Context(), s.deps.Pool, t, req, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	// Streaming: headers go out with the first event, so an error before it is still a problem.
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
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
	_, err = command.Run(r.Context(), s.deps.Pool, t, req, func(e command.Event) {
		start()
		_ = enc.Encode(e)
		if flusher != nil {
			flusher.Flush()
		}
	})
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

type multiResult struct {
	System string          `json:"system"`
	Result *command.Result `json:"result,omitempty"`
	Error  *Problem        `json:"error,omitempty"`
}

// runMany runs one command on many systems at once (parallel-ssh's job), one result per system
// in the order given.
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
	req, err := body.validate()
	if err != nil {
		return err
	}
	owner := principal(r).User
	results := make([]multiResult, len(body.Systems))
	sem := make(chan struct{}, s.cfg.MaxFanout)
	var wg sync.WaitGroup
	for i, id := range body.Systems {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i].System = id
			t, _, err := s.target(r.Context(), owner, id)
			var res *command.Result
			if err == nil {
				res, err = command.Run(r.Context(), s.deps.Pool, t, req, nil)
			}
			if err != nil {
				p := s.problemFor(r, err)
				results[i].Error = &p
				return
			}
			results[i].Result = res
		}()
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
	return nil
}
