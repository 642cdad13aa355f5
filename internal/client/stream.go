package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// CommandEvent is one line of a streamed command: stdout/stderr data, the exit or an error.
type CommandEvent struct {
	Type     string `json:"type"`
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
	Result   *struct {
		ExitStatus *int   `json:"exit_status"`
		Signal     string `json:"signal"`
		TimedOut   bool   `json:"timed_out"`
	} `json:"result"`
	Error *Problem `json:"error"`
}

// Bytes is the event's data decoded.
func (e CommandEvent) Bytes() []byte {
	if e.Encoding == "base64" {
		b, _ := base64.StdEncoding.DecodeString(e.Data)
		return b
	}
	return []byte(e.Data)
}

// maxEventLine bounds one NDJSON or SSE line (the server sends output in small pieces).
const maxEventLine = 4 << 20

// Run runs command on system, calling onEvent for each event as it arrives, and returns the
// final (exit or error) event.
func (c *Client) Run(ctx context.Context, system, command string, timeout time.Duration, onEvent func(CommandEvent) error) (CommandEvent, error) {
	body := map[string]any{"command": command}
	if timeout > 0 {
		body["timeout_s"] = timeout.Seconds()
	}
	req, err := c.request(ctx, http.MethodPost, "/v1/systems/"+url.PathEscape(system)+"/commands", nil, body)
	if err != nil {
		return CommandEvent{}, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req)
	if err != nil {
		return CommandEvent{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var ev CommandEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return ev, fmt.Errorf("command output: %w", err)
		}
		switch ev.Type {
		case "exit":
			return ev, nil
		case "error":
			if ev.Error != nil {
				return ev, ev.Error
			}
			return ev, fmt.Errorf("command failed")
		}
		if err := onEvent(ev); err != nil {
			return ev, err
		}
	}
	if err := sc.Err(); err != nil {
		return CommandEvent{}, fmt.Errorf("command output: %w", err)
	}
	return CommandEvent{}, fmt.Errorf("command output ended without an exit event")
}

// Endpoint is a path on a system.
type Endpoint struct {
	System string `json:"system"`
	Path   string `json:"path"`
}

// TransferRequest starts a transfer.
type TransferRequest struct {
	Source      Endpoint `json:"source"`
	Destination Endpoint `json:"destination"`
	Recursive   bool     `json:"recursive,omitempty"`
	Sync        string   `json:"sync,omitempty"`
}

// Transfer is a transfer's state.
type Transfer struct {
	ID          string    `json:"id"`
	Status      string    `json:"status"`
	Source      Endpoint  `json:"source"`
	Destination Endpoint  `json:"destination"`
	BytesTotal  int64     `json:"bytes_total"`
	BytesDone   int64     `json:"bytes_done"`
	FilesTotal  int64     `json:"files_total"`
	FilesDone   int64     `json:"files_done"`
	Rate        float64   `json:"rate_bytes_per_s"`
	Error       string    `json:"error"`
	CreatedAt   time.Time `json:"created_at"`
}

// Done reports whether the transfer has finished.
func (t Transfer) Done() bool {
	return t.Status == "succeeded" || t.Status == "failed" || t.Status == "canceled"
}

// SubmitTransfer queues a transfer.
func (c *Client) SubmitTransfer(ctx context.Context, r TransferRequest) (Transfer, error) {
	var t Transfer
	err := c.do(ctx, http.MethodPost, "/v1/transfers", nil, r, &t)
	return t, err
}

// Transfer returns a transfer's state.
func (c *Client) Transfer(ctx context.Context, id string) (Transfer, error) {
	var t Transfer
	err := c.do(ctx, http.MethodGet, "/v1/transfers/"+url.PathEscape(id), nil, nil, &t)
	return t, err
}

// Transfers lists the caller's transfers, newest first.
func (c *Client) Transfers(ctx context.Context, limit int) ([]Transfer, error) {
	var out struct {
		Transfers []Transfer `json:"transfers"`
	}
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	err := c.do(ctx, http.MethodGet, "/v1/transfers", q, nil, &out)
	return out.Transfers, err
}

// CancelTransfer cancels a transfer and returns its state afterwards.
func (c *Client) CancelTransfer(ctx context.Context, id string) (Transfer, error) {
	var t Transfer
	err := c.do(ctx, http.MethodDelete, "/v1/transfers/"+url.PathEscape(id), nil, nil, &t)
	return t, err
}

// WaitTransfer follows the transfer's event stream, calling onProgress with each state, until it
// has finished; a stream that ends early (server shutdown, lost connection) is opened again.
func (c *Client) WaitTransfer(ctx context.Context, id string, onProgress func(Transfer)) (Transfer, error) {
	for {
		t, err := c.events(ctx, id, onProgress)
		if err == nil && t.Done() {
			return t, nil
		}
		if ctx.Err() != nil {
			return t, ctx.Err()
		}
		var p *Problem
		if errors.As(err, &p) && p.Status < 500 {
			return t, err // gone, forbidden, token expired: reopening the stream cannot help
		}
		select { // the stream broke: reopen it after a pause
		case <-ctx.Done():
			return t, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (c *Client) events(ctx context.Context, id string, onProgress func(Transfer)) (Transfer, error) {
	var last Transfer
	req, err := c.request(ctx, http.MethodGet, "/v1/transfers/"+url.PathEscape(id)+"/events", nil, nil)
	if err != nil {
		return last, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req)
	if err != nil {
		return last, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	event, data := "", ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(line[len("data:"):], " ")
		case line == "":
			if (event == "progress" || event == "done") && json.Unmarshal([]byte(data), &last) == nil {
				onProgress(last)
				if event == "done" {
					return last, nil
				}
			}
			if event == "shutdown" {
				return last, fmt.Errorf("server shutting down")
			}
			event, data = "", ""
		}
	}
	return last, fmt.Errorf("event stream ended: %v", sc.Err())
}
