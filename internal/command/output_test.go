package command

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/slot"
)

// TestOutputJSON writes held output in pieces of awkward sizes and checks that WriteJSON is
// valid JSON that decodes to exactly the bytes written, in the encoding the rules pick.
func TestOutputJSON(t *testing.T) {
	intp := func(i int) *int { return &i }
	tests := []struct {
		name    string
		out     []byte
		piece   int
		wantEnc string
	}{
		{"empty", nil, 1, ""},
		{"text with escapes", []byte("a \"quoted\" \\ line\n\ttab\r\x01"), 3, ""},
		{"multi-byte characters across chunk boundaries", bytes.Repeat([]byte("héllo wörld €𝄞 "), 2000), 4093, ""},
		{"not UTF-8", append(bytes.Repeat([]byte("ok"), 5000), 0xff, 0xfe), 777, "base64"},
		{"a few NUL bytes stay text", []byte("a\x00b"), 1, ""},
		{"mostly NUL bytes come base64", make([]byte, 300_000), 32 << 10, "base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &chunks{limit: 1 << 30}
			for p := tt.out; len(p) > 0; {
				k := min(tt.piece, len(p))
				c.write(p[:k])
				p = p[k:]
			}
			o := &Output{Result: Result{ExitStatus: intp(0), DurationMS: 5}, stdout: c, stderr: &chunks{}, res: &Reservation{}}
			o.StdoutEncoding = chooseEncoding(c)
			var buf bytes.Buffer
			if err := o.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			var got Result
			dec := json.NewDecoder(&buf)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("WriteJSON is not a Result: %v", err)
			}
			if got.StdoutEncoding != tt.wantEnc {
				t.Errorf("encoding %q, want %q", got.StdoutEncoding, tt.wantEnc)
			}
			data := []byte(got.Stdout)
			if got.StdoutEncoding == "base64" {
				var err error
				if data, err = base64.StdEncoding.DecodeString(got.Stdout); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(data, tt.out) || got.ExitStatus == nil || *got.ExitStatus != 0 || got.DurationMS != 5 {
				t.Errorf("decoded %d bytes (equal=%v), result %+v", len(data), bytes.Equal(data, tt.out), got)
			}
			// The string form (Run without a budget) agrees with the held form.
			s, enc := encodeChunks(c)
			if enc != got.StdoutEncoding || s != got.Stdout {
				t.Errorf("encodeChunks differs from WriteJSON (encodings %q vs %q)", enc, got.StdoutEncoding)
			}
		})
	}
}

// TestBudget: a reservation larger than the budget fails at once, a waiter is admitted when
// another releases, and a wait ends with the context.
func TestBudget(t *testing.T) {
	b := NewBudget(100, 100)
	if _, err := b.Reserve(t.Context(), "alice", 101); !errors.Is(err, ErrBudget) {
		t.Fatalf("over the whole budget: %v", err)
	}
	r1, err := b.Reserve(t.Context(), "alice", 80)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Reserve(ctx, "alice", 30); !errors.Is(err, ErrBudget) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := b.Reserve(t.Context(), "alice", 30)
		r.Release()
		got <- err
	}()
	r1.Shrink(70) // 10 bytes back: still not enough for 30
	select {
	case err := <-got:
		t.Fatalf("admitted with 30 free: %v", err)
	default:
	}
	r1.Release()
	r1.Release() // twice is harmless
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if r, err := b.Reserve(t.Context(), "alice", 100); err != nil {
		t.Fatalf("budget not whole again: %v", err)
	} else {
		r.Release()
	}
}

// TestBudgetShares: one user's reservations stop at the user's share, whatever is free, and
// another user's are admitted meanwhile; more than a share can never be reserved.
func TestBudgetShares(t *testing.T) {
	b := NewBudget(100, 40)
	if _, err := b.Reserve(t.Context(), "alice", 41); !errors.Is(err, ErrBudget) || !errors.Is(err, slot.ErrTooLarge) {
		t.Fatalf("over a share: %v", err)
	}
	held, err := b.Reserve(t.Context(), "alice", 40)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Reserve(ctx, "alice", 1); !errors.Is(err, ErrBudget) || !errors.Is(err, slot.ErrShare) {
		t.Fatalf("alice past her share with 60 bytes free: %v, want to wait for her share", err)
	}
	bob, err := b.Reserve(t.Context(), "bob", 40)
	if err != nil {
		t.Fatalf("bob while alice holds her share: %v", err)
	}
	bob.Release()
	held.Release()
	if r, err := b.Reserve(t.Context(), "alice", 40); err != nil {
		t.Fatalf("alice after releasing: %v", err)
	} else {
		r.Release()
	}
}

// TestRunBufferedKeepsWithinReservation runs a command printing more than its cap on both
// streams: the output held is the cap, and the reservation shrinks to what is held.
func TestRunBufferedKeepsWithinReservation(t *testing.T) {
	p, tg, _ := setup(t)
	b := NewBudget(8<<20, 8<<20)
	const capBytes = 1 << 20
	r, err := b.Reserve(t.Context(), "alice", 2*capBytes)
	if err != nil {
		t.Fatal(err)
	}
	o, err := RunBuffered(t.Context(), p, tg, Request{Command: "head -c 3000000 /dev/zero; echo short >&2", MaxOutput: capBytes}, r)
	if err != nil {
		t.Fatal(err)
	}
	if o.stdout.n != capBytes || !o.StdoutTruncated || o.StderrTruncated || o.StdoutEncoding != "base64" {
		t.Fatalf("held %d bytes, truncated %v/%v, encoding %q", o.stdout.n, o.StdoutTruncated, o.StderrTruncated, o.StdoutEncoding)
	}
	if held := o.stdout.held() + o.stderr.held(); held > 2*capBytes || r.n != held {
		t.Fatalf("holds %d bytes, reservation %d", held, r.n)
	}
	var buf bytes.Buffer
	if err := o.WriteJSON(&buf); err != nil || !strings.Contains(buf.String(), `"stderr":"short\n"`) {
		t.Fatalf("json: %v %.200s", err, buf.String())
	}
	o.Release()
	if r, err := b.Reserve(t.Context(), "alice", 8<<20); err != nil {
		t.Fatalf("released output still holds budget: %v", err)
	} else {
		r.Release()
	}
	// A reservation smaller than the command's caps is refused before anything runs.
	small, _ := b.Reserve(t.Context(), "alice", 10)
	if _, err := RunBuffered(t.Context(), p, tg, Request{Command: "true", MaxOutput: 1 << 20}, small); !errors.Is(err, ErrBudget) {
		t.Fatalf("small reservation: %v", err)
	}
}
