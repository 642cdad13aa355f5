package slot

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestOwnerOverShareLeavesPoolToOthers: bob holding his share (and waiting for more) does not
// stop alice from getting the rest of the pool at once.
func TestOwnerOverShareLeavesPoolToOthers(t *testing.T) {
	p := New(2, 1)
	bob, err := p.Acquire(t.Context(), "bob", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Acquire(ctx, "bob", 1); !errors.Is(err, ErrShare) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bob's second acquire: %v, want ErrShare after the deadline", err)
	}
	if _, err := p.TryAcquire("bob", 1); !errors.Is(err, ErrShare) {
		t.Fatalf("bob's try: %v, want ErrShare", err)
	}
	alice, err := p.TryAcquire("alice", 1)
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	if _, err := p.TryAcquire("carol", 1); !errors.Is(err, ErrFull) {
		t.Fatalf("carol with the pool full: %v, want ErrFull", err)
	}
	if _, err := p.Acquire(t.Context(), "carol", 2); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("more than a share: %v, want ErrTooLarge", err)
	}
	bob.Release()
	bob.Release() // idempotent
	carol, err := p.Acquire(t.Context(), "carol", 1)
	if err != nil {
		t.Fatalf("carol after bob released: %v", err)
	}
	alice.Release()
	carol.Release()
	if len(p.owners) != 0 {
		t.Fatalf("owners kept after every lease ended: %v", p.owners)
	}
}

// TestShrink gives units back to the pool and the owner's share.
func TestShrink(t *testing.T) {
	p := New(100, 60)
	l, err := p.Acquire(t.Context(), "a", 60)
	if err != nil {
		t.Fatal(err)
	}
	l.Shrink(10)
	if l.Units() != 10 {
		t.Fatalf("units after shrink: %d", l.Units())
	}
	l2, err := p.TryAcquire("a", 50)
	if err != nil {
		t.Fatalf("the owner's share freed by shrink: %v", err)
	}
	if _, err := p.TryAcquire("b", 41); !errors.Is(err, ErrFull) {
		t.Fatalf("b beyond the pool: %v", err)
	}
	l.Release()
	l2.Release()
	if l3, err := p.TryAcquire("b", 60); err != nil {
		t.Fatalf("everything back: %v", err)
	} else {
		l3.Release()
	}
}
