package transfer

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"
)

// orderedHash computes a file's SHA-256 from parts that finish in any order: a part at the end
// of the hashed prefix is hashed at once, with every waiting part it makes contiguous; a part
// further on waits, keeping its buffer (its release is called once it is hashed), which is what
// bounds the waiting parts by the parts in flight. Its state can be saved and restored
// (sha256's digest is an encoding.BinaryMarshaler), so a resumed run continues the prefix.
type orderedHash struct {
	mu      sync.Mutex
	h       hash.Hash
	off     int64
	waiting map[int64]waitingPart
	failed  bool
}

// waitingPart is a finished part ahead of the hashed prefix.
type waitingPart struct {
	b       []byte
	release func()
}

// newOrderedHash starts at offset off from a saved state (a fresh hash when state is nil).
func newOrderedHash(off int64, state []byte) (*orderedHash, error) {
	h := sha256.New()
	if state != nil {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
			return nil, fmt.Errorf("restore the hash state: %w", err)
		}
	} else {
		off = 0
	}
	return &orderedHash{h: h, off: off, waiting: map[int64]waitingPart{}}, nil
}

// offset is the end of the hashed prefix.
func (o *orderedHash) offset() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.off
}

// add hands over the bytes b at off. release is called once they are hashed, or at once when
// they lie before the prefix (hashed before a resume). It reports the new prefix end and the
// saved state when the prefix advanced (state nil otherwise).
func (o *orderedHash) add(off int64, b []byte, release func()) (int64, []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed || off < o.off {
		release()
		return o.off, nil
	}
	o.waiting[off] = waitingPart{b: b, release: release}
	advanced := false
	for {
		p, ok := o.waiting[o.off]
		if !ok {
			break
		}
		delete(o.waiting, o.off)
		o.h.Write(p.b)
		o.off += int64(len(p.b))
		p.release()
		advanced = true
		if len(p.b) == 0 {
			break
		}
	}
	if !advanced {
		return o.off, nil
	}
	state, err := o.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil { // sha256 never fails to marshal
		return o.off, nil
	}
	return o.off, state
}

// abort releases every waiting buffer (a part before them failed) and refuses further parts.
func (o *orderedHash) abort() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed = true
	for off, p := range o.waiting {
		p.release()
		delete(o.waiting, off)
	}
}

// sum is the hex SHA-256 of the prefix.
func (o *orderedHash) sum() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return hex.EncodeToString(o.h.Sum(nil))
}
