package openloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestRecorderSummary(t *testing.T) {
	start := time.Unix(1000, 0)
	rec := NewRecorder(start)
	// 1000 successes with latencies 1..1000 ms from their scheduled time, each sent 1 ms late.
	for i := 1; i <= 1000; i++ {
		sched := start.Add(time.Duration(i) * time.Millisecond)
		rec.scheduled(1)
		rec.Record(sched, sched.Add(time.Millisecond), sched.Add(time.Duration(i)*time.Millisecond), nil)
	}
	rec.scheduled(3)
	rec.Record(start, start, start.Add(time.Second), &StatusError{Code: 503})
	rec.Record(start, start, start.Add(time.Second), &StatusError{Code: 503})
	rec.Record(start, start, start.Add(time.Second), context.DeadlineExceeded)
	s := rec.Summary()
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*0.002+0.001 }
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"min", s.Latency.Min, 1}, {"p50", s.Latency.P50, 500}, {"p90", s.Latency.P90, 900}, {"p99", s.Latency.P99, 990},
		{"p99.9", s.Latency.P999, 999}, {"max", s.Latency.Max, 1000}, {"mean", s.Latency.Mean, 500.5},
		{"service p50", s.Service.P50, 499}, {"wall", s.WallS, 2.0},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if s.Scheduled != 1003 || s.OK != 1000 || s.Failed != 3 || s.Errors["http 503"] != 2 || s.Errors["timeout"] != 1 {
		t.Fatalf("counts %+v", s)
	}
	if s.AchievedRate != 500 {
		t.Errorf("achieved %v/s, want 1000 ok / 2 s", s.AchievedRate)
	}
	if got := s.ErrorKinds(); len(got) != 2 || got[0] != "http 503" {
		t.Errorf("kinds %v, want most frequent first", got)
	}
	if len(s.Curve) != len(curveQuantiles) || s.Curve[0].Ms != s.Latency.Min || s.Curve[len(s.Curve)-1].Ms != s.Latency.Max {
		t.Errorf("curve %v", s.Curve)
	}
	for i := 1; i < len(s.Curve); i++ {
		if s.Curve[i].Ms < s.Curve[i-1].Ms {
			t.Errorf("curve not monotonic: %v", s.Curve)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{&StatusError{Code: 503}, "http 503"},
		{fmt.Errorf("post: %w", &StatusError{Code: 401}), "http 401"},
		{&ExitError{Status: 3}, "exit 3"},
		{&KindError{K: "ssh: session refused (MaxSessions)"}, "ssh: session refused (MaxSessions)"},
		{fmt.Errorf("x: %w", ErrNotSent), "not sent (in-flight cap)"},
		{fmt.Errorf("post: %w", context.DeadlineExceeded), "timeout"},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, "timeout"},
		{context.Canceled, "canceled"},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "transport: connection refused"},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "transport: connection reset"},
		{fmt.Errorf("post: %w", io.EOF), "transport: eof"},
		{fmt.Errorf("post: %w", io.ErrUnexpectedEOF), "transport: eof"},
		{os.NewSyscallError("socket", syscall.EMFILE), "client: too many open files"},
		{errors.New("something else"), "other"},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
