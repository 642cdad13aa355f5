package access

import (
	"context"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// auditBatch bounds the entries written in one store call.
const auditBatch = 256

// auditItem is an entry to write, or (with done set) a flush marker.
type auditItem struct {
	e    store.AuditEntry
	done chan struct{}
}

// Record writes an audit entry. Once Start has run, entries go through a queue of
// Config.AuditQueue entries to one writer that stores them in batches (one transaction each),
// so requests do not wait for a write each; a full queue makes the caller write its entry
// itself, so nothing is dropped and memory stays bounded. Before Start (and after Stop) it
// writes at once.
func (r *Resolver) Record(ctx context.Context, e store.AuditEntry) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	r.auditMu.RLock()
	q := r.auditQ
	if q != nil {
		select {
		case q <- auditItem{e: e}:
			r.auditMu.RUnlock()
			return
		default:
		}
	}
	r.auditMu.RUnlock()
	r.writeAudit(ctx, []store.AuditEntry{e})
}

// FlushAudit waits until every entry recorded before the call is stored (read-your-writes for
// GET /v1/audit).
func (r *Resolver) FlushAudit(ctx context.Context) {
	r.auditMu.RLock()
	q := r.auditQ
	if q == nil {
		r.auditMu.RUnlock()
		return
	}
	done := make(chan struct{})
	select {
	case q <- auditItem{done: done}:
	case <-ctx.Done():
		r.auditMu.RUnlock()
		return
	}
	r.auditMu.RUnlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (r *Resolver) writeAudit(ctx context.Context, es []store.AuditEntry) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.deps.Store.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: es}); err != nil {
		r.log.Error("audit log write failed", "entries", len(es), "err", err)
	}
}

// auditWriter stores queued entries in batches until q is closed, then stores what is left.
func (r *Resolver) auditWriter(q chan auditItem, done chan struct{}) {
	defer close(done)
	batch := make([]store.AuditEntry, 0, auditBatch)
	var flushes []chan struct{}
	for it := range q {
		add := func(it auditItem) {
			if it.done != nil {
				flushes = append(flushes, it.done)
			} else {
				batch = append(batch, it.e)
			}
		}
		add(it)
	drain:
		for len(batch) < auditBatch {
			select {
			case it, ok := <-q:
				if !ok {
					break drain
				}
				add(it)
			default:
				break drain
			}
		}
		if len(batch) > 0 {
			r.writeAudit(context.Background(), batch)
			batch = batch[:0]
		}
		for _, f := range flushes {
			close(f)
		}
		flushes = flushes[:0]
	}
}
