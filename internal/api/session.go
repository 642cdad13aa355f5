package api

import (
	"errors"
	"net/http"

	"github.com/sshapi/sshapi/internal/auth"
)

// SessionAuthenticator authenticates browser requests by the web interface's session cookie
// (internal/ui), so that the page calls this API with the same principal a bearer token of
// the same user would have.
type SessionAuthenticator interface {
	// AuthenticateSession returns the principal of r's session cookie. ok is false when r
	// carries no session cookie (the bearer rules apply then). A cookie that is unknown or
	// expired is an error; one on a cross-origin request, or on a state-changing request
	// without the session's anti-CSRF token, is an error wrapping ErrCrossOrigin.
	AuthenticateSession(r *http.Request) (p auth.Principal, ok bool, err error)
}

// ErrCrossOrigin refuses a cookie-authenticated request that another site may have made: it
// is answered with 403, not 401.
var ErrCrossOrigin = errors.New("cross-origin request refused")

// sessionPrincipal authenticates r by its session cookie when it has no Authorization header
// and a SessionAuthenticator is configured; ok is false otherwise.
func (s *Server) sessionPrincipal(r *http.Request) (auth.Principal, bool, error) {
	if s.deps.Sessions == nil || r.Header.Get("Authorization") != "" {
		return auth.Principal{}, false, nil
	}
	return s.deps.Sessions.AuthenticateSession(r)
}
