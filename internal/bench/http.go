package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// NewHTTPClient returns a client suited to load generation: keep-alive connections without a
// per-host idle cap, so the client does not reconnect (or run out of ports) under load.
func NewHTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}
}

// API calls sshapi over HTTP as one user.
type API struct {
	// BaseURL is the service's root, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token is the bearer token.
	Token string
	// Client sends the requests; NewHTTPClient() when nil.
	Client *http.Client

	once sync.Once // fills Client on first use; calls come from many goroutines
}

func (a *API) client() *http.Client {
	a.once.Do(func() {
		if a.Client == nil {
			a.Client = NewHTTPClient()
		}
	})
	return a.Client
}

// Call sends a JSON request and decodes a JSON answer into out (if not nil). A status other than
// want is a *StatusError.
func (a *API) Call(ctx context.Context, method, path string, body any, want int, out any) error {
	b, err := a.send(ctx, method, path, body, want)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// send sends a JSON request and returns the whole answer's body. A status other than want is a
// *StatusError.
func (a *API) send(ctx context.Context, method, path string, body any, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return nil, &StatusError{Code: resp.StatusCode, Detail: truncate(string(bytes.TrimSpace(b)), 300)}
	}
	return b, nil
}

// CommandOp returns an Op that runs command on system through the study's route
// POST /sshapi/v2/{system}. A non-zero exit is an *ExitError.
func (a *API) CommandOp(system, command string) Op {
	return a.commandOp("/sshapi/v2/"+url.PathEscape(system), command)
}

// commandOp returns an Op that posts {"command": command} to path and expects an answer with
// exit_status 0.
func (a *API) commandOp(path, command string) Op {
	body := map[string]any{"command": command}
	return func(ctx context.Context) error {
		var res struct {
			ExitStatus *int `json:"exit_status"`
		}
		if err := a.Call(ctx, http.MethodPost, path, body, http.StatusOK, &res); err != nil {
			return err
		}
		if res.ExitStatus == nil {
			return &ExitError{Status: -1}
		}
		if *res.ExitStatus != 0 {
			return &ExitError{Status: *res.ExitStatus}
		}
		return nil
	}
}

// CheckOp returns an Op that makes sshapi establish and authenticate one fresh SSH connection to
// system: POST /v1/systems/{id}/credential/check always dials (through the pool's per-host dial
// limiter) instead of borrowing a pooled connection.
func (a *API) CheckOp(system string) Op {
	path := "/v1/systems/" + url.PathEscape(system) + "/credential/check"
	return func(ctx context.Context) error {
		var res struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if err := a.Call(ctx, http.MethodPost, path, nil, http.StatusOK, &res); err != nil {
			return err
		}
		if res.OK {
			return nil
		}
		return &KindError{K: checkKind(res.Error), Msg: res.Error}
	}
}

func checkKind(msg string) string {
	switch {
	case strings.Contains(msg, "authentication failed"):
		return "ssh: authentication failed"
	case strings.Contains(msg, "host key"):
		return "ssh: host key"
	case strings.Contains(msg, "deadline"), strings.Contains(msg, "timeout"):
		return "ssh: timeout"
	case strings.Contains(msg, "unavailable"):
		return "ssh: unavailable"
	}
	return "ssh: check failed"
}
