package store

import (
	"crypto/rand"
	"time"
)

// auditIDAlphabet is Crockford's base32 alphabet, in ASCII order, so that ids compare as
// strings the way the numbers they encode compare.
const auditIDAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewAuditID returns a new AuditEntry.ID: 26 characters, the creation time in milliseconds
// (48 bits, 10 characters) followed by 80 random bits (16 characters), as a ULID is.
//
// The id only makes appending idempotent (it is unique in the log; nothing reads it back, links
// to it or trusts it), so it needs to be unique across every instance writing to one database,
// which 80 random bits per millisecond are. The time in front makes ids of new entries sort
// after older ones, so the log's unique index on them grows at its right edge, as an
// autoincrement key does, instead of taking each insert to a random leaf page: fewer pages
// read and written (in the WAL) per commit of an audited request.
func NewAuditID() string { return newAuditID(time.Now()) }

// newAuditID is NewAuditID for an entry created at t.
func newAuditID(t time.Time) string {
	var b [26]byte
	ms := max(t.UnixMilli(), 0)
	for i := 9; i >= 0; i-- {
		b[i] = auditIDAlphabet[ms&31]
		ms >>= 5
	}
	var r [10]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand.Read crashes the program instead)
	for half := range 2 {
		var v uint64 // 40 bits, 8 characters
		for _, c := range r[half*5 : half*5+5] {
			v = v<<8 | uint64(c)
		}
		for i := 10 + half*8 + 7; i >= 10+half*8; i-- {
			b[i] = auditIDAlphabet[v&31]
			v >>= 5
		}
	}
	return string(b[:])
}
