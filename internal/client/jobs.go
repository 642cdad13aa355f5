package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sshapi/sshapi/internal/jobs"
)

// Job is a batch job as the API shows it.
type Job = jobs.Job

// JobSpec is a job to submit.
type JobSpec = jobs.Spec

func jobsPath(system string) string { return "/v1/systems/" + url.PathEscape(system) + "/jobs" }

// SubmitJob submits a batch job and returns it.
func (c *Client) SubmitJob(ctx context.Context, system string, spec JobSpec) (Job, error) {
	var j Job
	err := c.do(ctx, http.MethodPost, jobsPath(system), nil, spec, &j)
	return j, err
}

// Jobs lists the caller's jobs on system; state may be empty or comma-separated states.
func (c *Client) Jobs(ctx context.Context, system, state string) ([]Job, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	var out struct {
		Jobs []Job `json:"jobs"`
	}
	err := c.do(ctx, http.MethodGet, jobsPath(system), q, nil, &out)
	return out.Jobs, err
}

// Job returns one job or array task (123_4); script adds its batch script.
func (c *Client) Job(ctx context.Context, system, id string, script bool) (Job, error) {
	q := url.Values{}
	if script {
		q.Set("script", "true")
	}
	var j Job
	err := c.do(ctx, http.MethodGet, jobsPath(system)+"/"+url.PathEscape(id), q, nil, &j)
	return j, err
}

// CancelJob cancels a job.
func (c *Client) CancelJob(ctx context.Context, system, id string) error {
	return c.do(ctx, http.MethodDelete, jobsPath(system)+"/"+url.PathEscape(id), nil, nil, nil)
}

// WaitJob long-polls until the job is "running" or "finished" (renewing each poll of at most a
// minute) and returns it.
func (c *Client) WaitJob(ctx context.Context, system, id, until string) (Job, error) {
	for {
		q := url.Values{"wait": {until}, "timeout": {"60"}}
		var j Job
		if err := c.do(ctx, http.MethodGet, jobsPath(system)+"/"+url.PathEscape(id), q, nil, &j); err != nil {
			if IsStatus(err, http.StatusServiceUnavailable) {
				select {
				case <-ctx.Done():
					return j, ctx.Err()
				case <-time.After(2 * time.Second):
					continue
				}
			}
			return j, err
		}
		if j.Reached(until) {
			return j, nil
		}
	}
}

// JobOutput writes the last tailBytes of the job's stdout or stderr to w.
func (c *Client) JobOutput(ctx context.Context, system, id, stream string, tailBytes int64, w io.Writer) error {
	q := url.Values{"stream": {stream}, "tail_bytes": {strconv.FormatInt(tailBytes, 10)}}
	req, err := c.request(ctx, http.MethodGet, jobsPath(system)+"/"+url.PathEscape(id)+"/output", q, nil)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// FollowJobOutput writes the job's stdout or stderr to w from its start as the job writes it,
// until the job has finished, and returns the finished job.
func (c *Client) FollowJobOutput(ctx context.Context, system, id, stream string, w io.Writer) (Job, error) {
	q := url.Values{"stream": {stream}, "follow": {"true"}}
	req, err := c.request(ctx, http.MethodGet, jobsPath(system)+"/"+url.PathEscape(id)+"/output", q, nil)
	if err != nil {
		return Job{}, err
	}
	resp, err := c.send(req)
	if err != nil {
		return Job{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var l struct {
			Type, Data, Encoding string
			Job                  *Job
			Error                *Problem
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return Job{}, fmt.Errorf("output stream: %w", err)
		}
		switch l.Type {
		case "output":
			b := []byte(l.Data)
			if l.Encoding == "base64" {
				if b, err = base64.StdEncoding.DecodeString(l.Data); err != nil {
					return Job{}, fmt.Errorf("output stream: %w", err)
				}
			}
			if _, err := w.Write(b); err != nil {
				return Job{}, err
			}
		case "end":
			if l.Job != nil {
				return *l.Job, nil
			}
		case "error":
			if l.Error != nil {
				return Job{}, l.Error
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Job{}, err
	}
	return Job{}, fmt.Errorf("output stream of job %s ended early", id)
}
