package api

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/store/auditspool"
)

// auditNote collects what one request did; wrap writes it as the request's audit entry once
// the response is done.
type auditNote struct {
	mu          sync.Mutex
	systemOwner string
	system      string
	paths       []string
	linkID      string
	actor       string // "link:<id>" for requests made with a link
	detail      string
	fixed       bool // a fan-out: the entry names its systems in detail, not one system
	bytesIn     atomic.Int64
	// others are further owners' systems the request acted on, each recorded as an entry of
	// its own beside the request's (a transfer between two other owners' shared systems).
	others []auditTarget
}

// auditTarget is one system (by its owner) and the paths on it a request acted on.
type auditTarget struct {
	systemOwner, system string
	paths               []string
}

type auditNoteKey struct{}

func noteOf(r *http.Request) *auditNote {
	n, _ := r.Context().Value(auditNoteKey{}).(*auditNote)
	return n
}

// noteDecision records the system (by its owner) and paths a request acts on.
func noteDecision(ctx context.Context, d *access.Decision, paths ...string) {
	n, _ := ctx.Value(auditNoteKey{}).(*auditNote)
	if n == nil || d == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fixed {
		return
	}
	n.systemOwner, n.system = d.Owner, d.SystemID
	n.paths = append(n.paths, paths...)
	if d.Link != nil {
		n.linkID, n.actor = d.Link.ID, auth.LinkPrincipalPrefix+d.Link.ID
	}
}

// noteRefusal records a refused request on a system the caller can see (403): the owner sees
// the attempt in their audit.
func noteRefusal(ctx context.Context, caller, ref string, err error, paths ...string) {
	if !errors.Is(err, access.ErrDenied) && !errors.Is(err, access.ErrDisabled) {
		return
	}
	owner, id, perr := access.ParseRef(caller, ref)
	if perr == nil {
		noteDecision(ctx, &access.Decision{Owner: owner, SystemID: id}, paths...)
	}
}

// selfAudited are routes that record their own, more specific audit entry.
var selfAudited = map[string]bool{
	"POST /v1/systems": true, "PATCH /v1/systems/{id}": true, "DELETE /v1/systems/{id}": true,
	"PUT /v1/systems/{id}/credential": true, "DELETE /v1/systems/{id}/credential": true,
	"POST /sshapi/v2/load": true, "POST /sshapi/v2": true,
}

// audited reports whether a route's requests are recorded: everything that acts on a system's
// files, runs something or changes something; not listings of one's own objects or polling.
func audited(rt route) bool {
	switch {
	case strings.HasPrefix(rt.pattern, "/v1/links/"):
		return true
	case rt.public:
		return false
	case strings.Contains(rt.pattern, "{path...}"), strings.HasPrefix(rt.pattern, "/v1/systems/{id}/ops/"):
		return true
	case rt.method == http.MethodGet, rt.method == http.MethodHead, rt.method == http.MethodOptions:
		return false
	}
	return !selfAudited[rt.method+" "+rt.pattern]
}

// operation names a route in the audit.
func operation(rt route, r *http.Request) string {
	switch {
	case strings.HasPrefix(rt.pattern, "/v1/links/"):
		if rt.method == http.MethodGet {
			return "link.download"
		}
		return "link.upload"
	case strings.HasPrefix(rt.pattern, "/v1/systems/{id}/content/"):
		if rt.method == http.MethodGet {
			return "files.download"
		}
		return "files.upload"
	case strings.HasPrefix(rt.pattern, "/v1/systems/{id}/files/"):
		return "files.delete"
	case strings.HasPrefix(rt.pattern, "/v1/systems/{id}/uploads"): // resumable (tus)
		switch rt.method {
		case http.MethodPost:
			return "files.upload.create"
		case http.MethodDelete:
			return "files.upload.terminate"
		}
		return "files.upload"
	case rt.pattern == "/v1/systems/{id}/jobs":
		return "jobs.submit"
	case rt.pattern == "/v1/systems/{id}/jobs/{job_id}" && rt.method == http.MethodDelete:
		return "jobs.cancel"
	case strings.HasPrefix(rt.pattern, "/v1/systems/{id}/jobs/{job_id}/"):
		return "jobs." + strings.TrimPrefix(rt.pattern, "/v1/systems/{id}/jobs/{job_id}/")
	case rt.pattern == "/v1/systems/{id}/ops/{op}":
		return "files." + r.PathValue("op")
	case strings.HasPrefix(rt.pattern, "/v1/systems/{id}/") && strings.HasSuffix(rt.pattern, "/{path...}"):
		seg := strings.TrimSuffix(strings.TrimPrefix(rt.pattern, "/v1/systems/{id}/"), "/{path...}")
		return "files." + seg
	}
	return rt.method + " " + rt.pattern
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// requestID takes the caller's X-Request-Id if it is sane, or makes one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && requestIDPattern.MatchString(id) {
		return id
	}
	return newRequestID()
}

// newRequestID returns 20 random characters of the lowercase RFC 4648 base32 alphabet (100
// bits), what strings.ToLower(rand.Text()[:20]) made with three allocations, with one: every
// request without an X-Request-Id makes one.
func newRequestID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var b [20]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand: it crashes the program instead)
	for i, c := range b {
		b[i] = alphabet[c&31]
	}
	return string(b[:])
}

// countingBody counts the bytes a handler reads from the request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// commitAudit records the request's entry with status before the response's status line is
// sent, and reports whether it was committed: in the database, or — when the database write
// failed and this instance has an audit spool (see UseAuditSpool) — in the spool, fsynced, to be
// drained into the database once it is back. Either way the answer is the handler's own: the
// action happened, and its entry survives a kill -9.
//
// When neither took it, the action has already happened (the remote system changed, or data
// was read) but sshapi cannot prove it later, so the answer is not the handler's: it answers
// 500 (503 with Retry-After while the database is away) with a detail that says the action was
// carried out and its audit entry is missing, and the handler's own response is dropped. A GET's
// bytes are the body size the handler declared (Content-Length), as the entry is written before
// the body.
func (s *Server) commitAudit(w http.ResponseWriter, rt route, r *http.Request, n *auditNote, status int, reqID string) bool {
	var declared int64
	if r.Method == http.MethodGet {
		declared, _ = strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64)
	}
	err := s.writeAudit(rt, r, n, status, declared, reqID)
	if err == nil {
		return true
	}
	h := w.Header()
	for k := range h {
		if k != "X-Request-Id" {
			delete(h, k)
		}
	}
	what := "the request was carried out"
	if status >= 400 {
		what = "the request failed"
	}
	p := Problem{Status: http.StatusInternalServerError, Title: "Audit entry not recorded",
		Detail: fmt.Sprintf("%s (its answer would have been %d %s) but its audit entry could not be recorded; "+
			"see the server log (request id %s)", what, status, http.StatusText(status), reqID)}
	if s.storeUnavailable(err) || errors.Is(err, auditspool.ErrFull) { // the same request may go through in a moment
		p.Status, p.retryAfter = http.StatusServiceUnavailable, 2
	}
	writeProblem(w, r, p)
	return false
}

// writeAudit records the request's entry: who, acting as which owner, on what, with what
// result and how many bytes. It never records query strings, headers or bodies. It returns once
// the entry is committed (see recordAudit); requests that are not recorded return nil.
func (s *Server) writeAudit(rt route, r *http.Request, n *auditNote, status int, written int64, reqID string) error {
	n.mu.Lock()
	e := store.AuditEntry{Owner: principal(r).User, Action: operation(rt, r), SystemID: n.system, SystemOwner: n.systemOwner,
		Paths: n.paths, Status: status, RequestID: reqID, LinkID: n.linkID, Detail: n.detail}
	if n.actor != "" {
		e.Owner = n.actor
	}
	others := n.others
	n.mu.Unlock()
	if e.Owner == "" {
		return nil // a link request refused before its link was known
	}
	if e.SystemID == "" && status == http.StatusNotFound {
		return nil // no such system (or not visible to the caller): nothing was acted on
	}
	if e.SystemID == "" {
		e.SystemID = r.PathValue("id")
	}
	if e.SystemOwner == "" {
		e.SystemOwner = e.Owner
	}
	if r.Method == http.MethodGet {
		e.Bytes = written
	} else {
		e.Bytes = n.bytesIn.Load()
	}
	for _, o := range others {
		oe := e
		oe.SystemOwner, oe.SystemID, oe.Paths = o.systemOwner, o.system, o.paths
		if err := s.recordAudit(r.Context(), oe); err != nil {
			return err
		}
	}
	return s.recordAudit(r.Context(), e)
}

// noteFanout records the systems of a request that acts on several (POST /v1/commands).
func noteFanout(r *http.Request, systems []string) {
	n := noteOf(r)
	if n == nil {
		return
	}
	d := "systems: " + strings.Join(systems, ", ")
	if len(d) > maxAuditDetail {
		d = d[:maxAuditDetail] + "…"
	}
	n.mu.Lock()
	n.fixed, n.detail = true, d
	n.mu.Unlock()
}

// maxAuditDetail bounds an entry's detail.
const maxAuditDetail = 500
