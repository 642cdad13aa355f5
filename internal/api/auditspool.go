package api

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/auditspool"
)

// auditProbeTimeout bounds the database probe of a request refused while audit writes fail.
const auditProbeTimeout = 2 * time.Second

// auditState is what the server knows of where audit entries go.
type auditState struct {
	spool atomic.Pointer[auditspool.Spool]
	// down is set when an entry could be stored neither in the database nor in a spool, and
	// cleared by the next entry the database takes (or a probe that reaches it).
	down atomic.Bool
}

// UseAuditSpool makes sp (opened, started and closed by the caller) take the audit entries the
// database cannot, before any request is served. Without one, an entry the database does not
// take makes its request's answer a 503/500 (commitAudit).
func (s *Server) UseAuditSpool(sp *auditspool.Spool) { s.auditTo.spool.Store(sp) }

// recordAudit commits e before the request's answer goes out: to the database (through the
// group-commit writer), or, when that fails and a spool is in use, to the spool. e is given an
// id and its time first, so that the database stores it once even if the failed write had in
// fact committed and the spool replays it.
//
// Why this keeps the promise under concurrent requests and crashes: an answer is sent only
// after one of two durable commits returned (a database transaction, or an fsynced spool file
// renamed into place), and the spool's files are deleted only after the database committed
// their entries; a crash anywhere leaves either the row, or the file (replayed at the next
// start), or both (the replay is skipped by the entry id's unique index).
func (s *Server) recordAudit(ctx context.Context, e store.AuditEntry) error {
	if e.ID == "" {
		e.ID = store.NewAuditID()
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	err := s.access.Record(ctx, e)
	if err == nil {
		s.auditTo.down.Store(false)
		return nil
	}
	sp := s.auditTo.spool.Load()
	if sp == nil || errors.Is(err, store.ErrInvalid) {
		s.auditTo.down.Store(true)
		return err
	}
	if serr := sp.Append(ctx, e); serr != nil {
		s.auditTo.down.Store(true)
		s.log.Error("audit entry neither in the database nor in the spool", "request_id", e.RequestID, "err", serr)
		return errors.Join(err, serr)
	}
	s.log.Warn("audit entry spooled: the database did not take it", "request_id", e.RequestID, "spooled", sp.Pending(), "err", err)
	return nil
}

// auditRefusal is the answer to an audited request that must not run because its entry could
// not be kept: the spool is full, or (without a spool) the last entry could not be stored and
// the database still does not answer. Refusing before the handler runs means no action happens
// that its audit would miss. It returns nil when the request may run.
func (s *Server) auditRefusal(ctx context.Context) *Problem {
	if sp := s.auditTo.spool.Load(); sp != nil {
		if !sp.Full() {
			return nil
		}
		return &Problem{Status: http.StatusServiceUnavailable, Title: "Audit spool full",
			Detail: "the database is away and this instance's audit spool is full: nothing was done; try again shortly", retryAfter: 5}
	}
	if !s.auditTo.down.Load() {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, auditProbeTimeout)
	defer cancel()
	if err := s.deps.Store.Ping(pctx); err != nil {
		return &Problem{Status: http.StatusServiceUnavailable, Title: "Database unavailable",
			Detail: "audit entries cannot be recorded while the service's database is away: nothing was done; try again shortly", retryAfter: 2}
	}
	s.auditTo.down.Store(false)
	return nil
}
