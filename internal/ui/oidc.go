package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/store"
)

// loginTTL bounds a sign-in at the provider: state, nonce and PKCE verifier are forgotten after.
const loginTTL = 10 * time.Minute

// providerCache discovers the provider once it is first needed (a provider that is down at
// start does not stop the service) and keeps it.
type providerCache struct {
	mu   sync.Mutex
	prov *oidc.Provider
}

func (s *Server) provider(ctx context.Context) (*oidc.Provider, error) {
	s.prov.mu.Lock()
	defer s.prov.mu.Unlock()
	if s.prov.prov != nil {
		return s.prov.prov, nil
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, s.deps.HTTPClient), 15*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(ctx, s.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", s.cfg.Issuer, err)
	}
	s.prov.prov = p
	return p, nil
}

func (s *Server) oauthConfig(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     s.cfg.ClientID,
		ClientSecret: s.clientSecret,
		Endpoint:     p.Endpoint(),
		RedirectURL:  s.publicURL() + "/ui/callback",
		Scopes:       append([]string{oidc.ScopeOpenID}, s.cfg.Scopes...),
	}
}

// flowData is what a pending sign-in keeps (in the database, keyed by the hash of its state).
type flowData struct {
	Verifier string `json:"verifier"`
	Nonce    string `json:"nonce"`
	Next     string `json:"next"`
}

// login is GET /ui/login: it starts the authorization code flow with PKCE (S256), a state
// bound to this browser by a cookie, and a nonce.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Issuer == "" {
		http.Error(w, "no identity provider is configured (ui.issuer): sign in with the login link that `sshapi serve --print-token USER` prints", http.StatusNotFound)
		return
	}
	if !s.logins.Allow() {
		// Every start of a sign-in stores a row (until it expires): anonymous callers share a
		// bounded rate of them.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many sign-ins at once; try again in a moment", http.StatusTooManyRequests)
		return
	}
	p, err := s.provider(r.Context())
	if err != nil {
		s.log.Warn("identity provider unavailable", "err", err)
		http.Error(w, "the identity provider cannot be reached; try again later", http.StatusBadGateway)
		return
	}
	state, nonce, verifier := newSecret(), newSecret(), oauth2.GenerateVerifier()
	data, _ := json.Marshal(flowData{Verifier: verifier, Nonce: nonce, Next: safeNext(r.URL.Query().Get("next"))})
	err = s.deps.Store.CreateLoginFlow(r.Context(), &store.LoginFlow{KeyHash: hashOf(state), Kind: "oidc", Data: data, ExpiresAt: time.Now().Add(loginTTL)})
	if err != nil {
		internalError(w, s.log, "sign-in", err)
		return
	}
	http.SetCookie(w, secureCookie(loginCookieName, state, int(loginTTL.Seconds())))
	u := s.oauthConfig(p).AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier))
	http.Redirect(w, r, u, http.StatusFound)
}

// safeNext keeps a post-sign-in destination only if it is a page of the web interface.
func safeNext(next string) string {
	if strings.HasPrefix(next, "/ui/") && !strings.HasPrefix(next, "/ui//") && !strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return "/ui/"
}

// callback is GET /ui/callback: the provider's answer. The state must be this browser's
// (cookie) and pending (taken from the database once); the code is exchanged with the PKCE
// verifier; the ID token's signature, issuer, audience, expiry and nonce are checked.
func (s *Server) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	c, err := r.Cookie(loginCookieName)
	if err != nil || state == "" || c.Value != state {
		http.Error(w, "this sign-in was not started in this browser (or took too long): start again at /ui/login", http.StatusBadRequest)
		return
	}
	http.SetCookie(w, secureCookie(loginCookieName, "", -1))
	f, err := s.deps.Store.TakeLoginFlow(r.Context(), hashOf(state), "oidc", time.Now())
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, "this sign-in is unknown, used or expired: start again at /ui/login", http.StatusBadRequest)
		return
	}
	if err != nil {
		internalError(w, s.log, "sign-in", err)
		return
	}
	if e := q.Get("error"); e != "" {
		s.log.Info("identity provider refused the sign-in", "error", e)
		http.Error(w, "the identity provider did not sign you in ("+e+"): start again at /ui/login", http.StatusForbidden)
		return
	}
	var fd flowData
	if err := json.Unmarshal(f.Data, &fd); err != nil {
		internalError(w, s.log, "sign-in", err)
		return
	}
	p, err := s.provider(r.Context())
	if err != nil {
		http.Error(w, "the identity provider cannot be reached; try again later", http.StatusBadGateway)
		return
	}
	ctx := oidc.ClientContext(r.Context(), s.deps.HTTPClient)
	tok, err := s.oauthConfig(p).Exchange(ctx, q.Get("code"), oauth2.VerifierOption(fd.Verifier))
	if err != nil {
		s.log.Info("code exchange failed", "err", err)
		http.Error(w, "the identity provider did not accept the sign-in: start again at /ui/login", http.StatusBadGateway)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		http.Error(w, "the identity provider sent no ID token", http.StatusBadGateway)
		return
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: s.cfg.ClientID}).Verify(ctx, raw)
	if err != nil {
		s.log.Info("ID token refused", "err", err)
		http.Error(w, "the ID token was not valid: start again at /ui/login", http.StatusForbidden)
		return
	}
	if idt.Nonce != fd.Nonce {
		s.log.Info("ID token refused", "err", "nonce mismatch")
		http.Error(w, "the ID token was not valid: start again at /ui/login", http.StatusForbidden)
		return
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		internalError(w, s.log, "sign-in", err)
		return
	}
	principal, err := s.principalFromClaims(idt.Subject, claims)
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if err := s.startSession(r.Context(), w, principal); err != nil {
		internalError(w, s.log, "sign-in", err)
		return
	}
	http.Redirect(w, r, fd.Next, http.StatusSeeOther)
}

// The group bounds match the bearer token verifier's, and the subject is judged by the same
// auth.SubjectProblem, so a user is the same principal either way.
const (
	maxGroups   = 256
	maxGroupLen = 256
)

func (s *Server) principalFromClaims(sub string, claims map[string]any) (auth.Principal, error) {
	if why := auth.SubjectProblem(sub); why != "" {
		return auth.Principal{}, fmt.Errorf("the ID token's subject cannot name a user: %s", why)
	}
	var groups []string
	add := func(x any) {
		if g, ok := x.(string); ok && g != "" && len(g) <= maxGroupLen && len(groups) < maxGroups {
			groups = append(groups, g)
		}
	}
	switch t := claims[s.deps.GroupsClaim].(type) {
	case string:
		add(t)
	case []any:
		for _, x := range t {
			add(x)
		}
	}
	return auth.Principal{User: sub, Groups: groups}, nil
}
