package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/guard"
	"github.com/sshapi/sshapi/internal/store"
)

type opPathsKey struct{}
type linkDecisionKey struct{}

// withOpPaths records the paths a file operation touches (from its body), for decide.
func withOpPaths(r *http.Request, paths []string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), opPathsKey{}, paths))
}

type restructureKey struct{}

// withRestructure marks a file operation that can put a symlink at a name or rename an entry
// (move, symlink, copy, extract): through a grant or a link it holds the owner's guard
// exclusively (see access.Decision.Hold).
func withRestructure(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), restructureKey{}, true))
}

// restructures reports whether withRestructure marked r.
func restructures(r *http.Request) bool {
	v, _ := r.Context().Value(restructureKey{}).(bool)
	return v
}

type stopKey struct{}

// withStop gives r a context that holdFor can cancel, and the function that cancels it (call it
// when the request ends). wrap does it for every route, before any handler captures r: a file
// operation whose guard is lost then stops everything its handler does with r.Context().
func withStop(r *http.Request) (*http.Request, context.CancelCauseFunc) {
	ctx, stop := context.WithCancelCause(r.Context())
	return r.WithContext(context.WithValue(ctx, stopKey{}, stop)), stop
}

// holdFor takes d's guard for r (access.Decision.Hold; exclusive if withRestructure marked r)
// and binds r's work to it: if the hold is lost, r's context is cancelled with the hold's cause
// (guard.ErrLost), so the walk, download or move stops and the answer says why (problemFor).
// Call release exactly once, when the request no longer relies on the paths it checked.
func holdFor(r *http.Request, d *access.Decision) (release func(), err error) {
	held, rel, err := d.Hold(r.Context(), restructures(r))
	if err != nil || !d.Shared() {
		return rel, err
	}
	stop, _ := r.Context().Value(stopKey{}).(context.CancelCauseFunc)
	if stop == nil {
		rel()
		return nil, errors.New("api: a shared file operation outside wrap cannot be bound to its guard")
	}
	unbind := context.AfterFunc(held, func() {
		if cause := context.Cause(held); errors.Is(cause, guard.ErrLost) {
			stop(cause)
		}
	})
	return func() {
		unbind()
		rel()
	}, nil
}

// withLinkDecision makes a link route's decision the one file handlers use.
func withLinkDecision(r *http.Request, d *access.Decision) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), linkDecisionKey{}, d))
}

// decide asks the access layer whether the caller may do what the request asks on the system
// in its URL ("id" or "{owner}:{id}"): read for GET, write otherwise, on the URL's path or the
// paths an operation's body names. A link route has decided already.
func (s *Server) decide(r *http.Request) (*access.Decision, error) {
	if d, ok := r.Context().Value(decidedKey{}).(*access.Decision); ok {
		return d, nil // byKind decided already (and noted it)
	}
	if d, ok := r.Context().Value(linkDecisionKey{}).(*access.Decision); ok {
		noteDecision(r.Context(), d, urlPath(r))
		return d, nil
	}
	level := access.Write
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		level = access.Read
	}
	if w, _ := r.Context().Value(tusWriteKey{}).(bool); w {
		level = access.Write // a resumable upload's HEAD decides as its writes do
	}
	paths, ok := r.Context().Value(opPathsKey{}).([]string)
	if !ok {
		paths = []string{urlPath(r)}
	}
	p := principal(r)
	d, err := s.access.Resolve(r.Context(), access.Request{Caller: p, System: r.PathValue("id"), Level: level, Paths: paths})
	if err != nil {
		noteRefusal(r.Context(), p.User, r.PathValue("id"), err, paths...)
		return nil, err
	}
	noteDecision(r.Context(), d, paths...)
	return d, nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// redactPath hides a link token in a path that is echoed (problem instance, logs): whoever
// holds the URL knows it, but it is a secret nothing should repeat.
func redactPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "/v1/links/"); ok && rest != "" {
		return "/v1/links/{token}"
	}
	return p
}
