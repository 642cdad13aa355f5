package api

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// trickle writes body to the returned reader chunk bytes every gap, then closes it.
func trickle(t *testing.T, body []byte, chunk int, gap time.Duration) io.Reader {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() })
	go func() {
		defer pw.Close()
		for len(body) > 0 {
			n := min(chunk, len(body))
			if _, err := pw.Write(body[:n]); err != nil {
				return
			}
			body = body[n:]
			time.Sleep(gap) // the client's pace: what is being tested
		}
	}()
	return pr
}

// sendTrickled sends method path as alice with body trickled, and returns the status, the
// problem body and how long until the answer.
func (e *env) sendTrickled(method, path string, body io.Reader) (int, string, time.Duration) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, body)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), time.Since(start)
}

// TestSlowBodiesCutOff: request bodies must keep up http.min_body_rate over
// http.min_body_rate_window after http.min_body_rate_grace. A JSON body trickled a byte at a
// time and an upload below the rate are answered 408 problem+json soon after the grace and
// window (the upload leaving neither the file nor a temporary); an upload slow but steady above
// the rate, lasting several windows, is written whole.
func TestSlowBodiesCutOff(t *testing.T) {
	e := newEnvConfig(t, Config{MinBodyRate: 4096, MinBodyRateWindow: time.Second, MinBodyRateGrace: 500 * time.Millisecond}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)

	t.Run("json trickled", func(t *testing.T) {
		body := []byte(`{"id":"slow"` + strings.Repeat(" ", 100) + `}`) // 10 s at a byte per 100 ms
		status, problem, took := e.sendTrickled("POST", "/v1/systems", trickle(t, body, 1, 100*time.Millisecond))
		if status != http.StatusRequestTimeout || !strings.Contains(problem, "http.min_body_rate") {
			t.Fatalf("trickled JSON: %d %s, want 408 naming http.min_body_rate", status, problem)
		}
		if took > 5*time.Second {
			t.Fatalf("trickled JSON cut off after %s, want about grace + window", took)
		}
		t.Logf("trickled JSON cut off after %s: %s", took.Round(time.Millisecond), problem)
	})
	t.Run("upload below the rate", func(t *testing.T) {
		body := bytes.Repeat([]byte("s"), 10_000) // 1 KB/s for 10 s
		status, problem, took := e.sendTrickled("PUT", "/v1/systems/hpc/content"+dir+"/slow.bin", trickle(t, body, 100, 100*time.Millisecond))
		if status != http.StatusRequestTimeout || !strings.Contains(problem, "nothing was written") {
			t.Fatalf("slow upload: %d %s, want 408 saying nothing was written", status, problem)
		}
		if took > 5*time.Second {
			t.Fatalf("slow upload cut off after %s", took)
		}
		if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
			t.Fatalf("left behind: %v %v", left, err)
		}
		t.Logf("upload below the rate cut off after %s", took.Round(time.Millisecond))
	})
	t.Run("steady upload above the rate", func(t *testing.T) {
		body := bytes.Repeat([]byte("0123456789abcdef"), 2048) // 32 KiB at 10 KiB/s: over 3 s
		status, out, took := e.sendTrickled("PUT", "/v1/systems/hpc/content"+dir+"/steady.bin", trickle(t, body, 1024, 100*time.Millisecond))
		if status != http.StatusCreated {
			t.Fatalf("steady upload: %d %s", status, out)
		}
		got, err := os.ReadFile(filepath.Join(dir, "steady.bin"))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("steady upload written: %d bytes, %v", len(got), err)
		}
		t.Logf("steady upload above the rate took %s", took.Round(time.Millisecond))
	})
}
