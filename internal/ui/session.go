package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/api"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
)

// CookieName is the session cookie. The "__Host-" prefix makes browsers accept it only with
// Secure, Path=/ and no Domain, so no other host (a sibling subdomain) can set or shadow it.
// Browsers treat http://127.0.0.1 and http://localhost as secure, so it works there too.
const CookieName = "__Host-sshapi-session"

// loginCookieName binds a pending OpenID Connect sign-in to the browser that started it (it
// holds the state), so nobody can complete their own sign-in in someone else's browser.
const loginCookieName = "__Host-sshapi-login"

// CSRFHeader carries the session's anti-CSRF token on state-changing requests.
const CSRFHeader = "X-CSRF-Token"

// touchEvery is how stale a session's last-seen time may get before a request updates it:
// the idle expiry is that much coarse, and most requests write nothing.
const touchEvery = time.Minute

var _ api.SessionAuthenticator = (*Server)(nil)

// newSecret returns 32 random bytes, base64url-encoded.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// csrfToken derives the session's anti-CSRF token from its id: only someone who can read the
// page's /ui/session answer (the same origin) learns it, and nothing needs storing.
func csrfToken(sessionID string) string {
	m := hmac.New(sha256.New, []byte(sessionID))
	m.Write([]byte("sshapi csrf v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func secureCookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

// startSession creates a session for p and sets its cookie on w.
func (s *Server) startSession(ctx context.Context, w http.ResponseWriter, p auth.Principal) error {
	id := newSecret()
	sess := &store.Session{IDHash: hashOf(id), User: p.User, Groups: p.Groups, ExpiresAt: time.Now().Add(s.cfg.SessionMax)}
	if err := s.deps.Store.CreateSession(ctx, &store.SessionParams{Session: sess, MaxPerUser: s.cfg.MaxSessionsPerUser}); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	http.SetCookie(w, secureCookie(CookieName, id, int(s.cfg.SessionMax.Seconds())))
	s.log.Info("signed in", "user", p.User)
	return nil
}

// crossSite reports whether r may come from a page of another origin: by Sec-Fetch-Site
// (sent by every current browser), else by Origin. A request with neither is not judged here
// (old browsers, non-browser clients); state changes need the CSRF token anyway.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default:
		return true
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err != nil || u.Host != r.Host
	}
	return false
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// lookup returns the session of r's cookie and its id, or ok false without a cookie.
func (s *Server) lookup(r *http.Request) (sess *store.Session, id string, ok bool, err error) {
	c, cerr := r.Cookie(CookieName)
	if cerr != nil || c.Value == "" {
		return nil, "", false, nil
	}
	now := time.Now()
	sess, err = s.deps.Store.GetSession(r.Context(), hashOf(c.Value), now, now.Add(-s.cfg.SessionIdle))
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", true, errors.New("session expired or signed out: sign in again at /ui/")
	}
	if err != nil {
		return nil, "", true, err
	}
	if now.Sub(sess.LastSeenAt) > touchEvery {
		if err := s.deps.Store.TouchSession(r.Context(), sess.IDHash, now); err != nil {
			s.log.Warn("touching session", "err", err)
		}
	}
	return sess, c.Value, true, nil
}

// AuthenticateSession implements api.SessionAuthenticator.
func (s *Server) AuthenticateSession(r *http.Request) (auth.Principal, bool, error) {
	if s.cfg.Disabled {
		return auth.Principal{}, false, nil
	}
	if _, err := r.Cookie(CookieName); err != nil {
		return auth.Principal{}, false, nil
	}
	if err := s.checkOrigin(r); err != nil {
		return auth.Principal{}, true, err
	}
	sess, id, _, err := s.lookup(r)
	if err != nil {
		return auth.Principal{}, true, err
	}
	if !safeMethod(r.Method) && !hmac.Equal([]byte(r.Header.Get(CSRFHeader)), []byte(csrfToken(id))) {
		s.log.Info("refused a cookie request without its CSRF token", "user", sess.User, "method", r.Method)
		return auth.Principal{}, true, fmt.Errorf("%w: a request with the session cookie must carry the %s header from /ui/session", api.ErrCrossOrigin, CSRFHeader)
	}
	return s.principal(sess), true, nil
}

// checkOrigin refuses cookie requests from other sites: any request judged cross-site, and
// state changes CrossOriginProtection refuses.
func (s *Server) checkOrigin(r *http.Request) error {
	if crossSite(r) {
		return fmt.Errorf("%w: the session cookie is accepted from this origin only", api.ErrCrossOrigin)
	}
	if !safeMethod(r.Method) {
		if err := s.cop.Check(r); err != nil {
			return fmt.Errorf("%w: %v", api.ErrCrossOrigin, err)
		}
	}
	return nil
}

func (s *Server) principal(sess *store.Session) auth.Principal {
	p := auth.Principal{User: sess.User, Groups: sess.Groups}
	p.Operator = slices.Contains(s.deps.Operators, p.User) || (s.deps.OperatorGroup != "" && slices.Contains(p.Groups, s.deps.OperatorGroup))
	return p
}

// sessionInfo is GET /ui/session: who is signed in and the token for state changes.
type sessionInfo struct {
	User      string    `json:"user"`
	Groups    []string  `json:"groups"`
	Operator  bool      `json:"operator"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
	// Provider says whether an identity provider is configured (else only login links work).
	Provider bool `json:"provider"`
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if crossSite(r) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"cross-origin"}` + "\n"))
		return
	}
	sess, id, ok, err := s.lookup(r)
	if !ok || err != nil {
		if err != nil && ok {
			http.SetCookie(w, secureCookie(CookieName, "", -1))
		}
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": "not signed in", "provider": s.cfg.Issuer != ""})
		return
	}
	p := s.principal(sess)
	_ = json.NewEncoder(w).Encode(sessionInfo{User: p.User, Groups: nonNil(p.Groups), Operator: p.Operator, CSRFToken: csrfToken(id),
		ExpiresAt: sess.ExpiresAt, Provider: s.cfg.Issuer != ""})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// logout is POST /ui/logout (a form with the CSRF token, or the header): it deletes the
// session row, so the cookie is worthless on every instance, and clears the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if err := s.checkOrigin(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	sess, id, ok, err := s.lookup(r)
	if ok && err == nil {
		tok := r.Header.Get(CSRFHeader)
		if tok == "" {
			r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
			tok = r.PostFormValue("csrf_token")
		}
		if !hmac.Equal([]byte(tok), []byte(csrfToken(id))) {
			http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
			return
		}
		if err := s.deps.Store.DeleteSession(r.Context(), sess.IDHash); err != nil {
			internalError(w, s.log, "sign-out", err)
			return
		}
		s.log.Info("signed out", "user", sess.User)
	}
	http.SetCookie(w, secureCookie(CookieName, "", -1))
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// CreateLoginLink stores a single-use development login link for user, valid for the
// configured LoginLinkTTL, and returns its path and query ("/ui/link?t=…"). It refuses when an
// identity provider is configured: links are for the development setup only.
func (s *Server) CreateLoginLink(ctx context.Context, user string) (string, error) {
	if s.cfg.Issuer != "" {
		return "", errors.New("ui: login links are off while an identity provider is configured")
	}
	if s.cfg.Disabled {
		return "", errors.New("ui: the web interface is disabled")
	}
	if user == "" {
		return "", errors.New("ui: empty user")
	}
	secret := newSecret()
	err := s.deps.Store.CreateLoginFlow(ctx, &store.LoginFlow{KeyHash: hashOf(secret), Kind: "link", User: user, ExpiresAt: time.Now().Add(s.cfg.LoginLinkTTL)})
	if err != nil {
		return "", fmt.Errorf("ui: store login link: %w", err)
	}
	return "/ui/link?t=" + secret, nil
}

// loginLink is GET /ui/link?t=…: a development login link, used once.
func (s *Server) loginLink(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Issuer != "" {
		http.Error(w, "login links are off while an identity provider is configured", http.StatusNotFound)
		return
	}
	if crossSite(r) {
		http.Error(w, "open the login link directly, not from another site", http.StatusForbidden)
		return
	}
	t := r.URL.Query().Get("t")
	f, err := s.deps.Store.TakeLoginFlow(r.Context(), hashOf(t), "link", time.Now())
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, "this login link is unknown, used or expired: ask sshapi serve --print-token for a new one", http.StatusNotFound)
		return
	}
	if err != nil {
		internalError(w, s.log, "login link", err)
		return
	}
	if err := s.startSession(r.Context(), w, auth.Principal{User: f.User}); err != nil {
		internalError(w, s.log, "sign-in", err)
		return
	}
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("ui: client secret: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("ui: client secret file %s is empty", path)
	}
	return v, nil
}
