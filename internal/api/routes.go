package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/netpolicy"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/store"
)

// handlerFunc is an HTTP handler that returns its error instead of writing it; the router turns
// errors into problem+json once, in one place.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one entry of the API; the OpenAPI document must list exactly these.
type route struct {
	method, pattern string
	public          bool
	h               handlerFunc
}

// Routes lists every route the server serves (method and ServeMux pattern). The OpenAPI
// document is checked against it by a test.
func (s *Server) routes() []route {
	return []route{
		{"GET", "/healthz", true, s.healthz},
		{"GET", "/readyz", true, s.readyz},
		{"GET", "/v1/version", true, s.version},
		{"GET", "/metrics", true, s.metrics},
		{"GET", "/openapi.json", true, s.openapiJSON},
		{"GET", "/openapi.yaml", true, s.openapiYAML},

		{"POST", "/v1/systems", false, s.createSystem},
		{"GET", "/v1/systems", false, s.listSystems},
		{"GET", "/v1/systems/{id}", false, s.getSystem},
		{"PATCH", "/v1/systems/{id}", false, s.patchSystem},
		{"DELETE", "/v1/systems/{id}", false, s.deleteSystem},
		{"PUT", "/v1/systems/{id}/credential", false, s.putCredential},
		{"GET", "/v1/systems/{id}/credential", false, s.getCredential},
		{"DELETE", "/v1/systems/{id}/credential", false, s.deleteCredential},
		{"POST", "/v1/systems/{id}/credential/check", false, s.checkCredential},
		{"POST", "/v1/systems/{id}/commands", false, s.runCommandOn("id")},
		{"POST", "/v1/commands", false, s.runMany},
		{"GET", "/v1/audit", false, s.listAudit},
		{"POST", "/v1/systems/{id}/grants", false, s.createGrant},
		{"GET", "/v1/systems/{id}/grants", false, s.listGrants},
		{"DELETE", "/v1/systems/{id}/grants/{grant_id}", false, s.deleteGrant},
		{"POST", "/v1/systems/{id}/links", false, s.createLink},
		{"GET", "/v1/systems/{id}/links", false, s.listLinks},
		{"DELETE", "/v1/systems/{id}/links/{link_id}", false, s.deleteLink},
		{"GET", "/v1/links/{token}", true, s.linkRoute(access.Read, s.byKind(s.getContent, s.getObject))},
		{"PUT", "/v1/links/{token}", true, s.linkRoute(access.Write, s.byKind(s.putContent, s.putObject))},
		{"GET", "/v1/admin/audit", false, s.adminAudit},
		{"GET", "/v1/admin/systems", false, s.adminSystems},
		{"PUT", "/v1/admin/users/{user}/disabled", false, s.adminDisable},
		{"PUT", "/v1/admin/users/{user}/systems/{system}/disabled", false, s.adminDisable},

		// File routes serve an SSH system through package files and an S3 system through its
		// storage.Backend (objects.go); byKind makes the one access decision and picks.
		{"GET", "/v1/systems/{id}/ls/{path...}", false, s.byKind(s.listFiles, s.listObjects)},
		{"GET", "/v1/systems/{id}/stat/{path...}", false, s.byKind(s.statFile, s.statObject)},
		{"GET", "/v1/systems/{id}/content/{path...}", false, s.byKind(s.getContent, s.getObject)},
		{"PUT", "/v1/systems/{id}/content/{path...}", false, s.byKind(s.putContent, s.putObject)},
		{"POST", "/v1/systems/{id}/content/{path...}", false, s.byKind(s.postContent, s.postObject)},
		{"DELETE", "/v1/systems/{id}/files/{path...}", false, s.byKind(s.deleteFile, s.deleteObject)},
		{"POST", "/v1/systems/{id}/ops/{op}", false, s.fileOp}, // decides after reading the body: see objectOp
		{"GET", "/v1/systems/{id}/checksum/{path...}", false, s.byKind(s.checksumFile, s.checksumObject)},
		{"GET", "/v1/systems/{id}/head/{path...}", false, s.byKind(s.excerpt(false), s.excerptObject(false))},
		{"GET", "/v1/systems/{id}/tail/{path...}", false, s.byKind(s.excerpt(true), s.excerptObject(true))},
		{"GET", "/v1/systems/{id}/filetype/{path...}", false, s.byKind(s.fileType, unsupportedOn(storage.Commands, "file type"))},
		{"GET", "/v1/systems/{id}/text/{path...}", false, s.byKind(s.getText, unsupportedOn(storage.Commands, "text editing"))},
		{"PUT", "/v1/systems/{id}/text/{path...}", false, s.byKind(s.putText, unsupportedOn(storage.Commands, "text editing"))},
		{"GET", "/v1/systems/{id}/df/{path...}", false, s.byKind(s.diskUsage, unsupportedOn(storage.Commands, "disk usage"))},
		// Resumable uploads (tus) decide on the upload's destination path (tusDecide), not the URL.
		{"OPTIONS", "/v1/systems/{id}/uploads", false, s.tusOptions},
		{"POST", "/v1/systems/{id}/uploads", false, s.tusCreate},
		{"HEAD", "/v1/systems/{id}/uploads/{upload_id}", false, s.tusHead},
		{"PATCH", "/v1/systems/{id}/uploads/{upload_id}", false, s.tusPatch},
		{"DELETE", "/v1/systems/{id}/uploads/{upload_id}", false, s.tusDelete},

		{"POST", "/v1/systems/{id}/jobs", false, s.submitJob},
		{"GET", "/v1/systems/{id}/jobs", false, s.listJobs},
		{"GET", "/v1/systems/{id}/jobs/{job_id}", false, s.getJob},
		{"DELETE", "/v1/systems/{id}/jobs/{job_id}", false, s.jobAction("cancel")},
		{"POST", "/v1/systems/{id}/jobs/{job_id}/hold", false, s.jobAction("hold")},
		{"POST", "/v1/systems/{id}/jobs/{job_id}/release", false, s.jobAction("release")},
		{"GET", "/v1/systems/{id}/jobs/{job_id}/output", false, s.jobOutput},
		{"GET", "/v1/systems/{id}/jobs/{job_id}/events", false, s.jobEvents},

		{"POST", "/v1/transfers", false, s.createTransfer},
		{"GET", "/v1/transfers", false, s.listTransfers},
		{"GET", "/v1/transfers/{id}", false, s.getTransfer},
		{"DELETE", "/v1/transfers/{id}", false, s.cancelTransfer},
		{"GET", "/v1/transfers/{id}/items", false, s.listTransferItems},
		{"GET", "/v1/transfers/{id}/events", false, s.transferEvents},

		{"GET", "/sshapi/v2/{$}", true, s.paperWelcome},
		{"GET", "/sshapi/v2", false, s.paperList},
		{"POST", "/sshapi/v2", false, s.paperCreate},
		{"POST", "/sshapi/v2/load", false, s.paperLoad},
		{"POST", "/sshapi/v2/{name}", false, s.runCommandOn("name")},
	}
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	rts := s.routes()
	for _, rt := range rts {
		h := s.wrap(rt)
		mux.Handle(rt.method+" "+rt.pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, Problem{Status: http.StatusNotFound, Detail: "no such route: " + r.Method + " " + redactPath(r.URL.Path) + " (see /openapi.json)"})
	})
	return s.recoverer(normalizePath(wildcardPrefixes(rts), mux))
}

// normalizePath makes a request's path routable without a redirect (ServeMux answers a path
// with empty, "." or ".." segments with a redirect, which clients do not follow with a PUT body)
// while keeping file paths inside their route. It works on the escaped path, so an encoded slash
// (%2F) or dot (%2E) is data, never a separator or a dot segment. Segments are resolved from the
// left until they spell the prefix of a route with a {path...} wildcard ("/v1/systems/x/files/");
// everything after that prefix, literal dot segments and repeated slashes included, is the file
// path: it is handed to ServeMux as one escaped segment, so nothing in it can reach another
// route, and the handler resolves it as a path (inside the system's root_dir, if any).
func normalizePath(prefixes [][]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			rewritePath(r.URL, prefixes)
		}
		next.ServeHTTP(w, r)
	})
}

// rewritePath applies normalizePath's rule to u.
func rewritePath(u *url.URL, prefixes [][]string) {
	escaped := u.EscapedPath()
	if !strings.HasPrefix(escaped, "/") {
		return
	}
	segs := strings.Split(escaped[1:], "/")
	var stack []string // escaped, resolved segments
	var rest *string   // escaped file path, once a wildcard prefix is complete
	for i, seg := range segs {
		switch seg {
		case "", ".":
		case "..":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		default:
			stack = append(stack, seg)
		}
		if i+1 < len(segs) && matchesPrefix(stack, prefixes) {
			r := strings.Join(segs[i+1:], "/")
			rest = &r
			break
		}
	}
	trailing := rest == nil && len(stack) > 0 && strings.HasSuffix(escaped, "/")
	clean := "/" + strings.Join(stack, "/")
	switch {
	case rest != nil:
		file, err := url.PathUnescape(*rest)
		if err != nil {
			return // the server has already refused malformed escapes
		}
		clean += "/" + url.PathEscape(file)
	case trailing:
		clean += "/"
	}
	if clean == escaped {
		return
	}
	p, err := url.PathUnescape(clean)
	if err != nil {
		return
	}
	u.Path, u.RawPath = p, clean
}

// matchesPrefix reports whether the escaped segments spell one of the wildcard routes'
// prefixes; an empty string in a prefix is a single-segment wildcard ({id}).
func matchesPrefix(stack []string, prefixes [][]string) bool {
	for _, pre := range prefixes {
		if len(pre) != len(stack) {
			continue
		}
		ok := true
		for i, want := range pre {
			got, err := url.PathUnescape(stack[i])
			if err != nil || (want != "" && got != want) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// wildcardPrefixes returns the segments before "{path...}" of every route that has one, with ""
// for each single-segment wildcard.
func wildcardPrefixes(rts []route) [][]string {
	var out [][]string
	seen := map[string]bool{}
	for _, rt := range rts {
		pre, ok := strings.CutSuffix(rt.pattern, "/{path...}")
		if !ok || seen[pre] {
			continue
		}
		seen[pre] = true
		segs := strings.Split(strings.TrimPrefix(pre, "/"), "/")
		for i, s := range segs {
			if strings.HasPrefix(s, "{") {
				segs[i] = ""
			}
		}
		out = append(out, segs)
	}
	return out
}

// wrap adds authentication, body limits, metrics and logging around one route.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		reqID := requestID(r)
		sw.Header().Set("X-Request-Id", reqID)
		note := &auditNote{}
		r = r.WithContext(context.WithValue(r.Context(), auditNoteKey{}, note))
		r, stop := withStop(r)
		defer stop(nil)
		if r.Body != nil {
			r.Body = countingBody{ReadCloser: r.Body, n: &note.bytesIn}
		}
		if audited(rt) {
			// The batch writer may hold its commit briefly for this request's entry (see
			// access.Config.AuditCommitDelay).
			s.access.AuditStarted()
			defer s.access.AuditEnded()
			// The entry is committed before the status line goes out: an answered request is in
			// the audit even if the process dies right after.
			sw.commit = func(status int) bool { return s.commitAudit(w, rt, r, note, status, reqID) }
			defer func() {
				if sw.commit != nil { // a panic before anything was written: record it still
					_ = s.writeAudit(rt, r, note, http.StatusInternalServerError, 0, reqID)
				}
			}()
		}
		if !rt.public {
			p, err := s.authenticate(r)
			if errors.Is(err, ErrCrossOrigin) {
				writeProblem(sw, r, Problem{Status: http.StatusForbidden, Detail: err.Error()})
				s.observe(rt, r, sw, start, "")
				return
			}
			if err != nil {
				sw.Header().Set("WWW-Authenticate", `Bearer realm="sshapi"`)
				writeProblem(sw, r, Problem{Status: http.StatusUnauthorized, Detail: err.Error()})
				s.observe(rt, r, sw, start, "")
				return
			}
			r = r.WithContext(auth.WithPrincipal(r.Context(), p))
			s.access.Remember(r.Context(), p)
			if err := s.checkEnabled(rt, r); err != nil {
				writeProblem(sw, r, s.problemFor(r, err))
				s.observe(rt, r, sw, start, p.User)
				return
			}
		}
		if sw.commit != nil {
			if p := s.auditRefusal(r.Context()); p != nil { // its entry could not be kept: do nothing
				sw.commit = nil
				writeProblem(sw, r, *p)
				s.observe(rt, r, sw, start, principal(r).User)
				return
			}
		}
		if strings.HasSuffix(rt.pattern, "{path...}") && strings.ContainsRune(r.PathValue("path"), 0) {
			writeProblem(sw, r, s.problemFor(r, badField("path", "must not contain NUL bytes")))
			s.observe(rt, r, sw, start, principal(r).User)
			return
		}
		if s.streamsBody(rt) {
			s.limitBodyRate(sw, r, s.cfg.UploadIdleTimeout)
		} else if r.Body != nil {
			s.limitBodyRate(sw, r, 0)
			r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
		}
		if err := rt.h(sw, r); err != nil {
			if sw.status == 0 && !sw.failed {
				writeProblem(sw, r, s.problemFor(r, err))
			} else if !errors.Is(err, errNotCommitted) {
				s.log.Warn("error after the response started", "route", rt.pattern, "err", err)
			}
		}
		if sw.status == 0 && !sw.failed {
			sw.WriteHeader(http.StatusOK) // what net/http sends for a handler that wrote nothing
		}
		s.observe(rt, r, sw, start, principal(r).User)
	})
}

// checkEnabled refuses, before any handler runs, every request of a user an operator disabled
// and every request naming one of the caller's own systems that an operator disabled (403
// naming the switch), management routes included. The operators' own routes (/v1/admin) are
// not refused. Other users' systems ("{owner}:{id}") are judged by the access layer with the
// grant. Links (public routes) are decided by the access layer too.
func (s *Server) checkEnabled(rt route, r *http.Request) error {
	if strings.HasPrefix(rt.pattern, "/v1/admin/") {
		return nil
	}
	var ref string
	switch {
	case strings.HasPrefix(rt.pattern, "/v1/systems/{id}"):
		ref = r.PathValue("id")
	case rt.pattern == "/sshapi/v2/{name}":
		ref = r.PathValue("name")
	}
	caller := principal(r).User
	err := s.access.CheckEnabled(r.Context(), caller, ref)
	// The refusal is recorded on the system only when it is the caller's own: for another's
	// ("{owner}:{id}") this judged the caller's switch alone, not whether the caller may see
	// that system, and its owner's audit takes refusals only from callers who can (Resolve
	// records those, after the grant). The caller's own entry records the attempt either way.
	if owner, _, perr := access.ParseRef(caller, ref); ref != "" && perr == nil && owner == caller {
		noteRefusal(r.Context(), caller, ref, err)
	}
	return err
}

// streamsBody reports whether a route reads a large body itself (uploads); those are not capped.
func (s *Server) streamsBody(rt route) bool {
	return (strings.HasPrefix(rt.pattern, "/v1/systems/{id}/content/") || strings.HasPrefix(rt.pattern, "/v1/links/") ||
		strings.HasPrefix(rt.pattern, "/v1/systems/{id}/uploads")) && rt.method != "GET"
}

func (s *Server) observe(rt route, r *http.Request, sw *statusWriter, start time.Time, user string) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	d := time.Since(start)
	s.reqDuration.WithLabelValues(rt.method+" "+rt.pattern, strconv.Itoa(sw.status)).Observe(d.Seconds())
	level := slog.LevelDebug
	if sw.status >= 500 {
		level = slog.LevelWarn
	}
	ctx := context.Background() // what Logger.Debug and Logger.Warn pass the handler
	if !s.log.Enabled(ctx, level) {
		return // without boxing the attributes below, per request, for a line nobody keeps
	}
	// Never log bodies, query strings or headers: they may carry keys or tokens.
	s.log.Log(ctx, level, "http request", "method", r.Method, "route", rt.pattern, "status", sw.status, "duration_ms", d.Milliseconds(), "user", user,
		"client", r.RemoteAddr) // the service believes X-Forwarded-For only from trusted proxies
}

func (s *Server) authenticate(r *http.Request) (auth.Principal, error) {
	if p, ok, err := s.sessionPrincipal(r); ok {
		return p, err
	}
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" {
		return auth.Principal{}, errors.New("missing Authorization: Bearer <token> header")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return auth.Principal{}, errors.New("Authorization header must be 'Bearer <token>'")
	}
	p, err := s.deps.Verifier.Verify(r.Context(), strings.TrimSpace(token))
	if err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// problemFor maps an error to its HTTP problem. Internal errors are logged with detail and
// answered without it.
func (s *Server) problemFor(r *http.Request, err error) Problem {
	if cause := context.Cause(r.Context()); errors.Is(cause, guard.ErrLost) {
		// The request was stopped because its guard was lost (see holdFor): whatever its work
		// failed with, that is why.
		return Problem{Status: http.StatusServiceUnavailable, Detail: "the operation was stopped: " + cause.Error() + "; retry", retryAfter: 1}
	}
	var he *httpError
	if errors.As(err, &he) {
		return Problem{Status: he.status, Detail: he.detail, Errors: he.fields, retryAfter: he.retryAfter}
	}
	if p, ok := accessProblem(err); ok {
		return p
	}
	if p, ok := storageProblem(err); ok {
		return p
	}
	switch {
	case errors.Is(err, files.ErrOutsideRoot):
		return Problem{Status: http.StatusForbidden, Detail: outsideDetail(r, err)}
	case errors.Is(err, files.ErrChecksumMismatch):
		return Problem{Status: http.StatusUnprocessableEntity, Title: "Checksum mismatch", Detail: err.Error() + " (nothing was written)"}
	case errors.Is(err, files.ErrNoSpace):
		return Problem{Status: http.StatusInsufficientStorage, Detail: err.Error()}
	case errors.Is(err, files.ErrConnection):
		return Problem{Status: http.StatusServiceUnavailable, Detail: err.Error(), retryAfter: 1}
	case errors.Is(err, files.ErrInvalid):
		return Problem{Status: http.StatusBadRequest, Detail: err.Error()}
	case errors.Is(err, fs.ErrExist), errors.Is(err, files.ErrNotEmpty), errors.Is(err, files.ErrNotDir), errors.Is(err, files.ErrIsDir):
		return Problem{Status: http.StatusConflict, Detail: err.Error()}
	case errors.Is(err, fs.ErrNotExist) && isFileError(err):
		return Problem{Status: http.StatusNotFound, Detail: err.Error()}
	case errors.Is(err, fs.ErrPermission):
		return Problem{Status: http.StatusForbidden, Detail: err.Error()}
	case errors.Is(err, errors.ErrUnsupported):
		return Problem{Status: http.StatusNotImplemented, Detail: err.Error()}
	case errors.Is(err, store.ErrNotFound):
		return Problem{Status: http.StatusNotFound, Detail: notFoundDetail(r)}
	case errors.Is(err, store.ErrLimit):
		return Problem{Status: http.StatusConflict, Detail: err.Error() + ": delete some first"}
	case errors.Is(err, store.ErrConflict):
		return Problem{Status: http.StatusConflict, Detail: "already exists: " + err.Error()}
	case errors.Is(err, store.ErrInvalid):
		return Problem{Status: http.StatusBadRequest, Detail: err.Error()}
	case errors.Is(err, sshpool.ErrNegotiation):
		return Problem{Status: http.StatusBadGateway, Title: "SSH algorithm negotiation failed", Detail: err.Error() + " (check the system's ciphers and kex)"}
	case errors.Is(err, netpolicy.ErrDenied):
		return Problem{Status: http.StatusBadGateway, Title: "Network policy refuses the system's address", Detail: err.Error()}
	case errors.As(err, new(*sshpool.JumpError)) && errors.Is(err, sshpool.ErrAuth):
		return Problem{Status: http.StatusBadGateway, Title: "SSH authentication failed at the jump host", Detail: "the jump host rejected its system's stored credential; PUT a new one to that system's /credential: " + err.Error()}
	case errors.Is(err, sshpool.ErrAuth):
		return Problem{Status: http.StatusBadGateway, Title: "SSH authentication failed", Detail: "the system rejected the stored credential; PUT a new one to /v1/systems/{id}/credential (no further attempts are made with this one): " + err.Error()}
	case errors.Is(err, sshpool.ErrNoSFTP):
		return Problem{Status: http.StatusBadGateway, Title: "SFTP unavailable on the system", Detail: err.Error() + " (file operations need the server's SFTP subsystem; commands still run)"}
	case errors.Is(err, sshpool.ErrHostKey):
		return Problem{Status: http.StatusBadGateway, Title: "SSH host key mismatch", Detail: err.Error()}
	case errors.Is(err, sshpool.ErrUnavailable), errors.Is(err, sshpool.ErrClosed):
		return Problem{Status: http.StatusServiceUnavailable, Detail: err.Error(), retryAfter: 2}
	case errors.Is(err, sshpool.ErrConnLost):
		d := err.Error()
		if !errors.Is(err, command.ErrNotStarted) {
			d += " (the command may have run; it was not retried)"
		}
		return Problem{Status: http.StatusBadGateway, Title: "SSH connection lost", Detail: d, retryAfter: 2}
	case errors.Is(err, context.Canceled):
		return Problem{Status: 499, Title: "Client Closed Request", Detail: "the request was canceled"}
	case errors.Is(err, context.DeadlineExceeded):
		return Problem{Status: http.StatusGatewayTimeout, Detail: err.Error()}
	}
	if s.storeUnavailable(err) {
		s.log.Warn("database unavailable", "path", redactPath(r.URL.Path), "err", err)
		return Problem{Status: http.StatusServiceUnavailable, Title: "Database unavailable",
			Detail: "the service's database could not be reached; try again shortly", retryAfter: 2}
	}
	s.log.Error("internal error", "path", redactPath(r.URL.Path), "err", err)
	return Problem{Status: http.StatusInternalServerError, Detail: "internal error; see the server log"}
}

// storeUnavailable reports whether err means the store's database could not be reached (a
// store that can tell, as the PostgreSQL one can, says so): a restart or failover of the
// database is a 503 with Retry-After, not an internal error.
func (s *Server) storeUnavailable(err error) bool {
	u, ok := s.deps.Store.(interface{ Unavailable(error) bool })
	return ok && u.Unavailable(err)
}

// outsideDetail is the detail of a path refused for leaving its confinement. Only the owner,
// on their own system, is told where it led (the canonical path, e.g. a symlink's target);
// anyone acting through a grant or a link learns only that it is outside what is shared, never
// a path of the owner's outside it.
func outsideDetail(r *http.Request, err error) string {
	if n := noteOf(r); n != nil {
		n.mu.Lock()
		own := n.systemOwner != "" && n.linkID == "" && n.systemOwner == principal(r).User
		n.mu.Unlock()
		if own {
			return err.Error()
		}
	}
	return "the path is outside the path shared with you"
}

func isFileError(err error) bool {
	var fe *files.Error
	return errors.As(err, &fe)
}

func notFoundDetail(r *http.Request) string {
	if id := r.PathValue("id"); id != "" {
		return fmt.Sprintf("no system %q (or no credential for it) for this user", id)
	}
	if name := r.PathValue("name"); name != "" {
		return fmt.Sprintf("no named credential %q for this user", name)
	}
	return "not found"
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic in handler", "path", redactPath(r.URL.Path), "panic", fmt.Sprint(v))
				writeProblem(w, r, Problem{Status: http.StatusInternalServerError, Detail: "internal error; see the server log"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status code written. When commit is set, it runs once before the
// status line goes out (the request's audit entry); if it fails it has answered itself, and the
// handler's own header and writes are dropped (writes fail with errNotCommitted).
type statusWriter struct {
	http.ResponseWriter
	status  int
	written int64
	commit  func(status int) bool
	failed  bool
}

// errNotCommitted is what a handler's writes return after the response was replaced because the
// request's audit entry could not be recorded.
var errNotCommitted = errors.New("response replaced: the audit entry could not be recorded")

func (w *statusWriter) WriteHeader(code int) {
	if w.failed {
		return
	}
	if w.status == 0 && code >= 200 {
		if c := w.commit; c != nil {
			w.commit = nil
			if !c(code) {
				w.failed, w.status = true, http.StatusInternalServerError // what commit answered
				return
			}
		}
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.failed {
		return 0, errNotCommitted
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

// Flush lets streaming handlers push data through the wrapper.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.failed {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.deps.Store.Ping(ctx); err != nil {
		s.log.Warn("readiness: store unreachable", "err", err)
		return errStatus(http.StatusServiceUnavailable, "store unreachable")
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.deps.Version, "api": "v1"})
	return nil
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
