package access

import (
	"context"
	"fmt"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// auditBatch bounds the entries written in one store call.
const auditBatch = 256

// auditWriteTimeout bounds one store call of the audit writer.
const auditWriteTimeout = 10 * time.Second

// auditItem is an entry to write and where to report its commit, or (e unset, done set) a flush
// marker.
type auditItem struct {
	e     store.AuditEntry
	entry bool
	done  chan error
}

// Record stores an audit entry and returns once it is committed, so that a caller that answers
// only after Record returns never acknowledges an action whose entry a crash could still lose.
// Once Start has run, entries go through a queue of Config.AuditQueue entries to one writer that
// commits whatever has queued up meanwhile in one transaction (group commit), so concurrent
// requests share a commit rather than pay one each; a full queue makes the caller write its entry
// itself, so memory stays bounded. Before Start (and after Stop) it writes at once. The error
// says the entry could not be stored.
func (r *Resolver) Record(ctx context.Context, e store.AuditEntry) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	r.auditMu.RLock()
	q := r.auditQ
	if q != nil {
		done := make(chan error, 1)
		select {
		case q <- auditItem{e: e, entry: true, done: done}:
			r.auditMu.RUnlock()
			// Not bounded by ctx: the entry is committed (or fails) within the writer's timeouts
			// even when the caller goes away, and the caller must not answer before that.
			return <-done
		default:
		}
	}
	r.auditMu.RUnlock()
	return r.writeAudit(ctx, []store.AuditEntry{e})
}

// FlushAudit waits until every entry recorded before the call is stored. Record already waits
// for its own entry; this is for entries of requests still running.
func (r *Resolver) FlushAudit(ctx context.Context) {
	r.auditMu.RLock()
	q := r.auditQ
	if q == nil {
		r.auditMu.RUnlock()
		return
	}
	done := make(chan error, 1)
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

// writeAudit stores es in one transaction.
func (r *Resolver) writeAudit(ctx context.Context, es []store.AuditEntry) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	if err := r.deps.Store.AppendAuditBatch(ctx, &store.AuditAppendParams{Entries: es}); err != nil {
		r.log.Error("audit log write failed", "entries", len(es), "err", err)
		return fmt.Errorf("audit entry not recorded: %w", err)
	}
	return nil
}

// AuditStarted tells the batch writer that an audited request has started: it will record an
// entry (or end without one) and then call AuditEnded. While more such requests run than the
// writer holds entries for, it waits up to Config.AuditCommitDelay for theirs before committing.
func (r *Resolver) AuditStarted() { r.auditing.Add(1) }

// AuditEnded undoes one AuditStarted, once the request's entry is committed or will not be.
func (r *Resolver) AuditEnded() { r.auditing.Add(-1) }

// expectMore says whether the writer, holding n entries (n > 0), should wait for more: it may
// (AuditCommitDelay > 0), has room (auditBatch), and more audited requests are running than it
// holds entries for.
func (r *Resolver) expectMore(n int) bool {
	return n > 0 && n < auditBatch && r.cfg.AuditCommitDelay > 0 && r.auditing.Load() > int64(n)
}

// auditWriter commits queued entries in batches until q is closed, then commits what is left,
// and tells each entry's recorder the outcome. A batch is what has queued up, plus what arrives
// within AuditCommitDelay while other audited requests are still running (expectMore). When a batch fails, its entries are tried one by
// one, so one entry the store refuses does not fail the others.
func (r *Resolver) auditWriter(q chan auditItem, done chan struct{}) {
	defer close(done)
	batch := make([]store.AuditEntry, 0, auditBatch)
	var waiting []chan error // of the batch's entries, in order
	var flushes []chan error
	delay := time.NewTimer(time.Hour)
	delay.Stop()
	for it := range q {
		add := func(it auditItem) {
			if it.entry {
				batch = append(batch, it.e)
				waiting = append(waiting, it.done)
			} else {
				flushes = append(flushes, it.done)
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
		if r.expectMore(len(batch)) {
			delay.Reset(r.cfg.AuditCommitDelay)
		linger:
			for r.expectMore(len(batch)) {
				select {
				case it, ok := <-q:
					if !ok {
						break linger
					}
					add(it)
				case <-delay.C:
					break linger
				}
			}
			delay.Stop()
		}
		if len(batch) > 0 {
			if err := r.writeAudit(context.Background(), batch); err == nil || len(batch) == 1 {
				for _, w := range waiting {
					w <- err
				}
			} else {
				for i, e := range batch {
					waiting[i] <- r.writeAudit(context.Background(), []store.AuditEntry{e})
				}
			}
			clear(batch)
			batch = batch[:0]
			clear(waiting)
			waiting = waiting[:0]
		}
		for _, f := range flushes {
			f <- nil
		}
		clear(flushes)
		flushes = flushes[:0]
	}
}
