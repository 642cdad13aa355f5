// Package ui is sshapi's web interface: a file browser served by the service itself under
// /ui/, its sign-in and its sessions.
//
// Sign-in is the OpenID Connect authorization code flow run by the server (PKCE, state and
// nonce; github.com/coreos/go-oidc verifies the ID token, golang.org/x/oauth2 runs the
// exchange), or, in the development setup without an identity provider, a single-use login
// link that "sshapi serve --print-token" prints. Either ends in a session: a random id in a
// "__Host-" cookie (HttpOnly, Secure, SameSite=Lax) whose SHA-256 is a row in the database, so
// any instance serves it, with an idle and an absolute expiry. No token reaches the page.
//
// The page calls the /v1 API with that cookie: the API asks AuthenticateSession (it implements
// api.SessionAuthenticator) for requests without an Authorization header. A cookie counts only
// on same-origin requests (Sec-Fetch-Site, else Origin); a state-changing request must also
// pass net/http's CrossOriginProtection and carry the session's anti-CSRF token in the
// X-CSRF-Token header (an HMAC of the session id the page reads from /ui/session), which also
// covers old browsers that send neither header.
//
// Every response of the service gets "X-Content-Type-Options: nosniff"; API responses (user
// content) also get a sandboxing Content-Security-Policy, so a file opened in the app's origin
// can never run script there. The page has a strict CSP of its own (scripts and styles from
// /ui/static only).
package ui

import (
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sshapi/sshapi/internal/store"
)

// Config configures the web interface.
type Config struct {
	// Disabled turns the web interface off (no /ui/ routes, no session cookies on the API).
	Disabled bool `yaml:"disabled" env:"DISABLED"`
	// Issuer is the OpenID Connect provider users sign in with (its discovery document is at
	// Issuer/.well-known/openid-configuration). Empty: no provider; the development login
	// links of "sshapi serve --print-token" are the only way in.
	Issuer string `yaml:"issuer" env:"ISSUER"`
	// ClientID and the client secret are the web interface's registration at the provider
	// (a confidential client whose redirect URI is <public URL>/ui/callback).
	ClientID string `yaml:"client_id" env:"CLIENT_ID"`
	// ClientSecretFile holds the client secret (or SSHAPI_UI_CLIENT_SECRET, never in YAML).
	ClientSecretFile string `yaml:"client_secret_file" env:"CLIENT_SECRET_FILE"`
	ClientSecret     string `yaml:"-" env:"CLIENT_SECRET"`
	// Scopes are asked for besides "openid" (default "profile", "email" and "groups" is not
	// asked: providers differ; the groups claim is read when present).
	Scopes []string `yaml:"scopes" env:"SCOPES" envSeparator:","`
	// SessionIdle ends a session unused this long (default 1 h).
	SessionIdle time.Duration `yaml:"session_idle" env:"SESSION_IDLE"`
	// SessionMax ends a session this long after sign-in, whatever the activity (default 12 h).
	SessionMax time.Duration `yaml:"session_max" env:"SESSION_MAX"`
	// MaxSessionsPerUser bounds each user's sessions; signing in again beyond it ends the
	// oldest (default 20).
	MaxSessionsPerUser int `yaml:"max_sessions_per_user" env:"MAX_SESSIONS_PER_USER"`
	// LoginLinkTTL is how long a development login link works (default 10 min).
	LoginLinkTTL time.Duration `yaml:"login_link_ttl" env:"LOGIN_LINK_TTL"`
}

// WithDefaults fills in unset fields.
func (c Config) WithDefaults() Config {
	if c.SessionIdle <= 0 {
		c.SessionIdle = time.Hour
	}
	if c.SessionMax <= 0 {
		c.SessionMax = 12 * time.Hour
	}
	if c.MaxSessionsPerUser <= 0 {
		c.MaxSessionsPerUser = 20
	}
	if c.LoginLinkTTL <= 0 {
		c.LoginLinkTTL = 10 * time.Minute
	}
	if c.Scopes == nil {
		c.Scopes = []string{"profile", "email"}
	}
	return c
}

// Validate checks that a configured provider is complete.
func (c Config) Validate() error {
	if c.Issuer == "" {
		return nil
	}
	if c.ClientID == "" || (c.ClientSecret == "" && c.ClientSecretFile == "") {
		return errors.New("ui: issuer is set: client_id and client_secret_file (or SSHAPI_UI_CLIENT_SECRET) are required")
	}
	return nil
}

// Deps are the web interface's collaborators.
type Deps struct {
	// Store keeps sessions and pending sign-ins.
	Store store.SessionStore
	// Log receives sign-ins, sign-outs and refusals (never a cookie, code or token).
	Log *slog.Logger
	// PublicURL is the service's base URL as browsers reach it (http.public_url); the
	// redirect URI is PublicURL+"/ui/callback". Empty: the listen URL (SetListenURL).
	PublicURL string
	// HTTPClient talks to the provider; nil means a client with a 15 s timeout.
	HTTPClient *http.Client
	// GroupsClaim names the ID token claim with the user's groups (default "groups"); Operators
	// and OperatorGroup make operators as the bearer token verifier does.
	GroupsClaim   string
	Operators     []string
	OperatorGroup string
}

// Server serves the web interface. It owns a goroutine that deletes expired sessions, between
// Start and Stop.
type Server struct {
	cfg          Config
	deps         Deps
	log          *slog.Logger
	clientSecret string
	cop          *http.CrossOriginProtection
	prov         providerCache
	logins       *rate.Limiter // starts of sign-ins, which store a row each
	listenURL    atomic.Pointer[string]

	stop chan struct{}
	done sync.WaitGroup
}

//go:embed static
var staticFS embed.FS

// New builds a Server; it contacts no provider until the first sign-in.
func New(cfg Config, d Deps) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.HTTPClient == nil {
		d.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if d.GroupsClaim == "" {
		d.GroupsClaim = "groups"
	}
	s := &Server{cfg: cfg, deps: d, log: d.Log, cop: http.NewCrossOriginProtection(),
		logins: rate.NewLimiter(rate.Limit(loginRate), loginBurst)}
	s.clientSecret = cfg.ClientSecret
	if cfg.ClientSecretFile != "" {
		b, err := readSecretFile(cfg.ClientSecretFile)
		if err != nil {
			return nil, err
		}
		s.clientSecret = b
	}
	return s, nil
}

// SetListenURL sets the base URL used when Deps.PublicURL is empty ("http://127.0.0.1:8080").
func (s *Server) SetListenURL(u string) { s.listenURL.Store(&u) }

// publicURL is the base URL browsers reach the service at, without a trailing slash.
func (s *Server) publicURL() string {
	if s.deps.PublicURL != "" {
		return strings.TrimSuffix(s.deps.PublicURL, "/")
	}
	if u := s.listenURL.Load(); u != nil {
		return strings.TrimSuffix(*u, "/")
	}
	return ""
}

// Start runs the sweeper that deletes expired sessions and sign-ins every few minutes.
func (s *Server) Start(ctx context.Context) {
	if s.stop != nil {
		return
	}
	s.stop = make(chan struct{})
	s.done.Add(1)
	go s.sweep(context.WithoutCancel(ctx))
}

// Stop ends the sweeper and waits for it.
func (s *Server) Stop() {
	if s.stop == nil {
		return
	}
	close(s.stop)
	s.done.Wait()
	s.stop = nil
}

const sweepInterval = 5 * time.Minute

// loginRate and loginBurst bound how fast sign-ins may start (per instance): at most
// loginRate × loginTTL pending rows, 12,000 with the defaults.
const (
	loginRate  = 20
	loginBurst = 100
)

func (s *Server) sweep(ctx context.Context) {
	defer s.done.Done()
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			now := time.Now()
			c, cancel := context.WithTimeout(ctx, 30*time.Second)
			n, err := s.deps.Store.DeleteExpiredSessions(c, now, now.Add(-s.cfg.SessionIdle))
			cancel()
			if err != nil {
				s.log.Warn("deleting expired sessions", "err", err)
			} else if n > 0 {
				s.log.Debug("deleted expired sessions and sign-ins", "rows", n)
			}
		}
	}
}

// Handler serves the web interface under /ui/ (and redirects / there) and everything else
// with api, adding the response headers that keep user content inert (see the package doc).
func (s *Server) Handler(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", newCompressedStatic(static)))
	mux.HandleFunc("GET /ui/{$}", s.index)
	mux.HandleFunc("GET /ui/session", s.session)
	mux.HandleFunc("GET /ui/login", s.login)
	mux.HandleFunc("GET /ui/callback", s.callback)
	mux.HandleFunc("GET /ui/link", s.loginLink)
	mux.HandleFunc("POST /ui/logout", s.logout)
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found", http.StatusNotFound)
	})
	ui := pageHeaders(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path == "/" || r.URL.Path == "/ui" || len(r.URL.Path) >= 4 && r.URL.Path[:4] == "/ui/" {
			ui.ServeHTTP(w, r)
			return
		}
		// API responses are data, never documents of this origin: even a file a browser is
		// made to render (HTML, SVG) runs no script and loads nothing.
		w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'; frame-ancestors 'none'")
		api.ServeHTTP(w, r)
	})
}

// contentSecurityPolicy is the page's: its own scripts and styles only, images from its own
// origin and from blobs it made (previews), connections to its own origin (the API).
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func pageHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	b, err := staticFS.ReadFile("static/index.html")
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// hashOf is what the store keeps of a session id, state or link secret.
func hashOf(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func internalError(w http.ResponseWriter, log *slog.Logger, what string, err error) {
	log.Error(what, "err", err)
	http.Error(w, fmt.Sprintf("internal error (%s); see the server log", what), http.StatusInternalServerError)
}
