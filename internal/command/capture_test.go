package command

import (
	"bytes"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// TestCaptureReadFrom copies output into a capture the way the SSH session does (io.Copy from a
// reader without WriteTo), kept and streamed, and checks that every byte arrives in order
// although the copy buffer is reused between reads and between commands.
func TestCaptureReadFrom(t *testing.T) {
	in := strings.Repeat("héllo wörld\n", 10_000) // 140 KB: several reads, runes split across them
	tests := []struct {
		name   string
		stream bool
	}{{"kept", false}, {"streamed", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 3 { // later rounds reuse pooled buffers
				var streamed bytes.Buffer
				c := &capture{max: 1 << 20, name: "stdout", buf: chunks{limit: 1 << 20}}
				if tt.stream {
					c.emit = func(e Event) { streamed.WriteString(e.Data) }
				}
				n, err := io.Copy(c, iotest.HalfReader(strings.NewReader(in)))
				if err != nil || n != int64(len(in)) {
					t.Fatalf("io.Copy = %d, %v; want %d, nil", n, err, len(in))
				}
				c.flush()
				got := string(c.buf.bytes())
				if tt.stream {
					got = streamed.String()
				}
				if got != in {
					t.Fatalf("captured %d bytes that differ from the %d written", len(got), len(in))
				}
			}
		})
	}
}

// TestCaptureCopyAllocs checks that copying a command's short output into a capture does not
// allocate a copy buffer per stream: io.Copy allocates 32 KiB each time unless the destination
// reads for itself (capture.ReadFrom, with pooled buffers).
func TestCaptureCopyAllocs(t *testing.T) {
	const runs = 200
	out := " 19:02:03 up 11:38,  0 user,  load average: 1.00, 1.00, 1.00\n"
	copyOnce := func() {
		c := &capture{max: 1 << 20, name: "stdout", buf: chunks{limit: 1 << 20}}
		if _, err := io.Copy(c, iotest.HalfReader(strings.NewReader(out))); err != nil {
			t.Fatal(err)
		}
	}
	copyOnce()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		copyOnce()
	}
	runtime.ReadMemStats(&after)
	// Each copy keeps its output in a minChunk (4 KiB) buffer; 16 KiB is well above that and
	// well below a 32 KiB copy buffer.
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 16<<10 {
		t.Errorf("%d bytes allocated per copy of %d bytes of output, want at most 16 KiB", per, len(out))
	}
}

// TestOutputJSONPooled: WriteJSON of a short result is the same JSON call after call (with every
// field set: signal, encodings, flags) and does not allocate a 32 KiB buffered writer per call.
func TestOutputJSONPooled(t *testing.T) {
	c := &chunks{limit: 1 << 20}
	c.write([]byte("up 3 days\n"))
	o := &Output{Result: Result{Signal: "KILL", DurationMS: 1234, StdoutTruncated: true, TimedOut: true, StderrEncoding: "base64"},
		stdout: c, stderr: &chunks{}, res: &Reservation{}}
	want := `{"exit_status":null,"signal":"KILL","stdout":"up 3 days\n","stderr":"","stderr_encoding":"base64",` +
		`"stdout_truncated":true,"stderr_truncated":false,"timed_out":true,"duration_ms":1234}`
	for range 3 {
		var buf bytes.Buffer
		if err := o.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		if buf.String() != want {
			t.Fatalf("WriteJSON:\n got %s\nwant %s", buf.String(), want)
		}
	}
	const runs = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		_ = o.WriteJSON(io.Discard)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 16<<10 {
		t.Errorf("%d bytes allocated per WriteJSON of a short result, want at most 16 KiB", per)
	}
}
