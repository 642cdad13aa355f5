package access

import (
	"context"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// purgeInterval is how often audit entries older than the retention are deleted.
const purgeInterval = time.Hour

// Start starts the audit batch writer (see Record), begins deleting audit entries older than
// Config.AuditRetention (at once, then hourly; a negative retention keeps everything) and
// dropping the credentials kept parsed that went unused for Config.CredentialCacheIdle, until
// Stop.
func (r *Resolver) Start(ctx context.Context) {
	r.auditMu.Lock()
	if r.auditQ == nil {
		r.auditQ, r.auditDone = make(chan auditItem, r.cfg.AuditQueue), make(chan struct{})
		go r.auditWriter(r.auditQ, r.auditDone)
	}
	r.auditMu.Unlock()
	if r.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		purge := time.NewTicker(purgeInterval)
		defer purge.Stop()
		sweep := time.NewTicker(sweepInterval(r.cfg.CredentialCacheIdle))
		defer sweep.Stop()
		r.PurgeAudit(ctx, time.Now())
		for {
			select {
			case <-ctx.Done():
				return
			case <-purge.C:
				r.PurgeAudit(ctx, time.Now())
			case now := <-sweep.C:
				r.derived.sweep(now.Add(-r.cfg.CredentialCacheIdle))
			}
		}
	}()
}

// sweepInterval is how often kept credentials are swept for idle ones: twice per idle time (so
// an entry goes at most 1.5 idle times after its last use), not more than once a second.
func sweepInterval(idle time.Duration) time.Duration { return max(idle/2, time.Second) }

// Stop ends the purging and sweeping started by Start, stores the queued audit entries and
// waits for all of them.
func (r *Resolver) Stop() {
	r.auditMu.Lock()
	if r.auditQ != nil {
		close(r.auditQ)
		<-r.auditDone
		r.auditQ = nil
	}
	r.auditMu.Unlock()
	if r.stop != nil {
		r.stop()
		<-r.done
		r.stop = nil
	}
}

// PurgeAudit deletes the audit entries older than the retention at now and returns how many.
func (r *Resolver) PurgeAudit(ctx context.Context, now time.Time) int64 {
	if r.cfg.AuditRetention < 0 {
		return 0
	}
	n, err := r.deps.Store.PurgeAudit(ctx, &store.AuditPurgeParams{Before: now.Add(-r.cfg.AuditRetention)})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("audit retention: purge failed", "err", err)
		}
		return 0
	}
	if n > 0 {
		r.log.Info("audit retention: purged old entries", "entries", n, "retention", r.cfg.AuditRetention)
	}
	return n
}
