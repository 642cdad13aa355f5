package command

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Chunk sizes of captured output: the first piece is small (most commands print little), later
// ones double up to maxChunk, so keeping output never copies what was already kept and never
// holds more than the bytes kept plus one chunk.
const (
	minChunk = 4 << 10
	maxChunk = 1 << 20
)

// base64Min is the smallest output that may be sent base64 only because JSON escaping would
// make it larger; below it, valid UTF-8 always comes as text.
const base64Min = 1 << 10

// chunks is captured output kept in pieces.
type chunks struct {
	bufs  [][]byte
	n     int64
	limit int64 // no chunk is allocated beyond this many bytes in all; 0 means none
	alloc int64
}

func (c *chunks) write(p []byte) {
	c.n += int64(len(p))
	for len(p) > 0 {
		if len(c.bufs) == 0 || len(c.last()) == cap(c.last()) {
			size := minChunk
			if len(c.bufs) > 0 {
				size = min(2*cap(c.last()), maxChunk)
			}
			if c.limit > 0 {
				size = int(max(min(int64(size), c.limit-c.alloc), int64(len(p))))
			}
			c.alloc += int64(size)
			c.bufs = append(c.bufs, make([]byte, 0, size))
		}
		l := &c.bufs[len(c.bufs)-1]
		k := min(len(p), cap(*l)-len(*l))
		*l = append(*l, p[:k]...)
		p = p[k:]
	}
}

// held is the memory the chunks occupy.
func (c *chunks) held() int64 { return c.alloc }

func (c *chunks) last() []byte { return c.bufs[len(c.bufs)-1] }

// trimPartialRune drops an incomplete UTF-8 sequence at the very end, which may span chunks.
func (c *chunks) trimPartialRune() {
	var tail []byte
	for i := len(c.bufs) - 1; i >= 0 && len(tail) < utf8.UTFMax; i-- {
		b := c.bufs[i]
		k := min(len(b), utf8.UTFMax-len(tail))
		tail = append(append([]byte(nil), b[len(b)-k:]...), tail...)
	}
	drop := len(tail) - len(trimPartialRune(tail))
	for drop > 0 && len(c.bufs) > 0 {
		l := &c.bufs[len(c.bufs)-1]
		k := min(drop, len(*l))
		*l = (*l)[:len(*l)-k]
		c.n -= int64(k)
		drop -= k
		if len(*l) == 0 {
			c.bufs = c.bufs[:len(c.bufs)-1]
		}
	}
}

// bytes returns the output as one slice (for callers that want a string).
func (c *chunks) bytes() []byte {
	out := make([]byte, 0, c.n)
	for _, b := range c.bufs {
		out = append(out, b...)
	}
	return out
}

// scan reports whether the output is valid UTF-8 and, if so, the length of its JSON string
// escaping (without quotes).
func (c *chunks) scan() (valid bool, escaped int64) {
	var carry []byte // an incomplete character from the end of the previous chunk
	for _, b := range c.bufs {
		if len(carry) > 0 {
			tmp := append(carry, b[:min(len(b), utf8.UTFMax-len(carry))]...)
			r, size := utf8.DecodeRune(tmp)
			if r == utf8.RuneError && size <= 1 {
				if !utf8.FullRune(tmp) && len(tmp) < utf8.UTFMax {
					carry = tmp
					continue
				}
				return false, 0
			}
			escaped += int64(size)
			b = b[size-len(carry):]
			carry = nil
		}
		cut := len(trimPartialRune(b))
		if !utf8.Valid(b[:cut]) {
			return false, 0
		}
		escaped += escapedLen(b[:cut])
		carry = append([]byte(nil), b[cut:]...)
	}
	return len(carry) == 0, escaped
}

// escapedLen is the length of b inside a JSON string (encoding/json with HTML escaping off).
func escapedLen(b []byte) int64 {
	n := int64(len(b))
	for _, c := range b {
		switch {
		case c == '"', c == '\\', c == '\n', c == '\r', c == '\t':
			n++
		case c < 0x20:
			n += 5
		}
	}
	return n
}

// encodingFor chooses how output of n bytes travels in JSON: as text when it is valid UTF-8,
// unless escaping would make a large output bigger than base64 would (mostly control
// characters, such as NUL bytes), then "base64".
func encodingFor(valid bool, n, escaped int64) string {
	if !valid || (n >= base64Min && escaped > int64(base64.StdEncoding.EncodedLen(int(n)))) {
		return "base64"
	}
	return ""
}

// chooseEncoding is encodingFor applied to captured output.
func chooseEncoding(c *chunks) string {
	valid, escaped := c.scan()
	return encodingFor(valid, c.n, escaped)
}

// writeJSONString writes the output as a JSON string in encoding enc ("" or "base64").
func (c *chunks) writeJSONString(w *bufio.Writer, enc string) error {
	_ = w.WriteByte('"')
	if enc == "base64" {
		bw := base64.NewEncoder(base64.StdEncoding, w)
		for _, b := range c.bufs {
			if _, err := bw.Write(b); err != nil {
				return err
			}
		}
		if err := bw.Close(); err != nil {
			return err
		}
	} else {
		for _, b := range c.bufs {
			if err := writeEscaped(w, b); err != nil {
				return err
			}
		}
	}
	return w.WriteByte('"')
}

const hexDigits = "0123456789abcdef"

// writeEscaped writes b with JSON string escaping.
func writeEscaped(w *bufio.Writer, b []byte) error {
	start := 0
	for i, c := range b {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		if _, err := w.Write(b[start:i]); err != nil {
			return err
		}
		switch c {
		case '"', '\\':
			_, _ = w.Write([]byte{'\\', c})
		case '\n':
			_, _ = w.WriteString(`\n`)
		case '\r':
			_, _ = w.WriteString(`\r`)
		case '\t':
			_, _ = w.WriteString(`\t`)
		default:
			_, _ = w.Write([]byte{'\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf]})
		}
		start = i + 1
	}
	_, err := w.Write(b[start:])
	return err
}

// Output is a finished command whose stdout and stderr are held (within a Reservation) rather
// than copied into strings; WriteJSON sends it as the Result JSON object without building it
// in memory. Release gives the memory and the reservation back.
type Output struct {
	Result
	stdout, stderr *chunks
	res            *Reservation
}

// jsonWriters holds WriteJSON's buffered writers between commands: a fresh one per command was
// a zeroed 32 KiB allocation for what is mostly a few hundred bytes of JSON.
var jsonWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// WriteJSON writes the result as the JSON object a Result marshals to (without a trailing
// newline), with the captured output in stdout and stderr, through a small buffer.
func (o *Output) WriteJSON(w io.Writer) error {
	bw := jsonWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil) // hold no reference to w while pooled
		jsonWriters.Put(bw)
	}()
	field := func(name string, v any) {
		_, _ = bw.WriteString(`,"` + name + `":`)
		switch v := v.(type) {
		case bool:
			_, _ = bw.WriteString(strconv.FormatBool(v))
		case int64:
			_, _ = bw.WriteString(strconv.FormatInt(v, 10))
		default:
			b, _ := json.Marshal(v) // plain values: cannot fail
			_, _ = bw.Write(b)
		}
	}
	_, _ = bw.WriteString(`{"exit_status":`)
	if o.ExitStatus != nil {
		_, _ = bw.WriteString(strconv.Itoa(*o.ExitStatus))
	} else {
		_, _ = bw.WriteString("null")
	}
	if o.Signal != "" {
		field("signal", o.Signal)
	}
	for _, s := range []struct {
		name string
		c    *chunks
		enc  string
	}{{"stdout", o.stdout, o.StdoutEncoding}, {"stderr", o.stderr, o.StderrEncoding}} {
		_, _ = bw.WriteString(`,"` + s.name + `":`)
		if err := s.c.writeJSONString(bw, s.enc); err != nil {
			return err
		}
		if s.enc != "" {
			field(s.name+"_encoding", s.enc)
		}
	}
	field("stdout_truncated", o.StdoutTruncated)
	field("stderr_truncated", o.StderrTruncated)
	field("timed_out", o.TimedOut)
	field("duration_ms", o.DurationMS)
	_ = bw.WriteByte('}')
	return bw.Flush()
}

// Release drops the captured output and returns its reservation to the budget.
func (o *Output) Release() {
	o.stdout, o.stderr = &chunks{}, &chunks{}
	o.res.Release()
}
