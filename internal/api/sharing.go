package api

import (
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/confine"
	"github.com/sshapi/sshapi/internal/store"
)

// Sharing: grants and links on the caller's own systems. Only the owner manages them; the
// access layer decides what they allow.

type grantRequest struct {
	Principal string     `json:"principal"`
	Path      string     `json:"path"`
	Access    string     `json:"access"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

type grantJSON struct {
	ID        string     `json:"id"`
	System    string     `json:"system"`
	Principal string     `json:"principal"`
	Path      string     `json:"path"`
	Access    string     `json:"access"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

func toGrantJSON(g *store.Grant) grantJSON {
	j := grantJSON{ID: g.ID, System: g.SystemID, Principal: g.Principal, Path: g.Path, Access: g.Access, CreatedAt: g.CreatedAt}
	if !g.ExpiresAt.IsZero() {
		e := g.ExpiresAt
		j.ExpiresAt = &e
	}
	return j
}

// maxNameLen bounds a user or group name in a grant.
const maxNameLen = 256

// ownSystem loads the caller's own system named in the URL (never another's).
func (s *Server) ownSystem(r *http.Request) (*store.System, error) {
	return s.deps.Store.GetSystem(r.Context(), principal(r).User, r.PathValue("id"))
}

// sharePath checks a grant's or link's path: absolute, clean, and inside the system's
// root_dir when that is absolute.
func sharePath(sys *store.System, p string) (string, error) {
	if p == "" || !strings.HasPrefix(p, "/") {
		return "", badField("path", "must be an absolute path")
	}
	if strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", badField("path", "must not contain NUL bytes or exceed 4096 bytes")
	}
	p = path.Clean(p)
	if strings.HasPrefix(sys.RootDir, "/") && !confine.Within(path.Clean(sys.RootDir), p) {
		return "", badField("path", "must be inside the system's root_dir %s", sys.RootDir)
	}
	return p, nil
}

func checkPrincipal(p, self string) error {
	name, ok := strings.CutPrefix(p, "user:")
	if !ok {
		name, ok = strings.CutPrefix(p, "group:")
	}
	switch {
	case p == access.Authenticated:
		return nil
	case !ok || name == "" || len(name) > maxNameLen || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return badField("principal", `must be "user:NAME", "group:NAME" or "authenticated"`)
	case p == "user:"+self:
		return badField("principal", "is the system's owner, who needs no grant")
	}
	return nil
}

func (s *Server) createGrant(w http.ResponseWriter, r *http.Request) error {
	var req grantRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sys, err := s.ownSystem(r)
	if err != nil {
		return err
	}
	if err := checkPrincipal(req.Principal, sys.Owner); err != nil {
		return err
	}
	p, err := sharePath(sys, req.Path)
	if err != nil {
		return err
	}
	if _, ok := access.ParseLevel(req.Access); !ok {
		return badField("access", `must be "read" or "write"`)
	}
	g := &store.Grant{Owner: sys.Owner, SystemID: sys.ID, Principal: req.Principal, Path: p, Access: req.Access}
	if req.ExpiresAt != nil {
		if !req.ExpiresAt.After(time.Now()) {
			return badField("expires_at", "must be in the future")
		}
		g.ExpiresAt = *req.ExpiresAt
	}
	if err := s.deps.Store.CreateGrant(r.Context(), &store.GrantCreateParams{Grant: g, Max: s.access.Config().MaxGrantsPerSystem}); err != nil {
		return err
	}
	noteDecision(r.Context(), &access.Decision{Owner: sys.Owner, SystemID: sys.ID}, p)
	w.Header().Set("Location", "/v1/systems/"+sys.ID+"/grants/"+g.ID)
	writeJSON(w, http.StatusCreated, toGrantJSON(g))
	return nil
}

func (s *Server) listGrants(w http.ResponseWriter, r *http.Request) error {
	sys, err := s.ownSystem(r)
	if err != nil {
		return err
	}
	gs, err := s.deps.Store.ListGrants(r.Context(), &store.GrantListParams{Owner: sys.Owner, SystemID: sys.ID})
	if err != nil {
		return err
	}
	out := make([]grantJSON, 0, len(gs))
	for i := range gs {
		out = append(out, toGrantJSON(&gs[i]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"grants": out})
	return nil
}

func (s *Server) deleteGrant(w http.ResponseWriter, r *http.Request) error {
	sys, err := s.ownSystem(r)
	if err != nil {
		return err
	}
	if err := s.deps.Store.DeleteGrant(r.Context(), &store.GrantDeleteParams{Owner: sys.Owner, SystemID: sys.ID, ID: r.PathValue("grant_id")}); err != nil {
		return errNotFoundAs(err, "no grant %q on system %q", r.PathValue("grant_id"), sys.ID)
	}
	noteDecision(r.Context(), &access.Decision{Owner: sys.Owner, SystemID: sys.ID})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// errNotFoundAs gives a store.ErrNotFound a precise detail.
func errNotFoundAs(err error, format string, args ...any) error {
	if isNotFound(err) {
		return errStatus(http.StatusNotFound, format, args...)
	}
	return err
}

type linkRequest struct {
	Path      string `json:"path"`
	Access    string `json:"access"`
	ExpiresIn *int64 `json:"expires_in_s,omitempty"`
	MaxUses   *int64 `json:"max_uses,omitempty"`
}

type linkJSON struct {
	ID        string    `json:"id"`
	URL       string    `json:"url,omitempty"`
	System    string    `json:"system"`
	Path      string    `json:"path"`
	Access    string    `json:"access"`
	ExpiresAt time.Time `json:"expires_at"`
	MaxUses   int64     `json:"max_uses"`
	Uses      int64     `json:"uses"`
	CreatedAt time.Time `json:"created_at"`
}

func toLinkJSON(l *store.Link) linkJSON {
	return linkJSON{ID: l.ID, System: l.SystemID, Path: l.Path, Access: l.Access, ExpiresAt: l.ExpiresAt,
		MaxUses: l.MaxUses, Uses: l.Uses, CreatedAt: l.CreatedAt}
}

// maxLinkUses bounds max_uses.
const maxLinkUses = 1 << 40

func (s *Server) createLink(w http.ResponseWriter, r *http.Request) error {
	var req linkRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sys, err := s.ownSystem(r)
	if err != nil {
		return err
	}
	p, err := sharePath(sys, req.Path)
	if err != nil {
		return err
	}
	level, ok := access.ParseLevel(req.Access)
	if !ok {
		return badField("access", `must be "read" or "write"`)
	}
	cfg := s.access.Config()
	ttl := cfg.LinkDefaultTTL
	if req.ExpiresIn != nil {
		if *req.ExpiresIn < 1 || *req.ExpiresIn > int64(cfg.LinkMaxTTL/time.Second) {
			return badField("expires_in_s", "must be between 1 and %d", int64(cfg.LinkMaxTTL/time.Second))
		}
		ttl = time.Duration(*req.ExpiresIn) * time.Second
	}
	var maxUses int64
	if req.MaxUses != nil {
		if *req.MaxUses < 1 || *req.MaxUses > maxLinkUses {
			return badField("max_uses", "must be between 1 and %d (leave it out for no limit)", int64(maxLinkUses))
		}
		maxUses = *req.MaxUses
	}
	l, token, err := s.access.NewLink(r.Context(), sys.Owner, sys.ID, p, level, time.Now().Add(ttl), maxUses)
	if err != nil {
		return err
	}
	j := toLinkJSON(l)
	j.URL = s.publicURL() + "/v1/links/" + token // shown once; only its hash is kept. Never from the request's Host header.
	noteLink(r, sys, l.ID, p)
	w.Header().Set("Location", "/v1/systems/"+sys.ID+"/links/"+l.ID)
	writeJSON(w, http.StatusCreated, j)
	return nil
}

func (s *Server) listLinks(w http.ResponseWriter, r *http.Request) error {
	sys, err := s.ownSystem(r)
	if err != nil {
		return err
	}
	ls, err := s.deps.Store.ListLinks(r.Context(), &store.LinkListParams{Owner: sys.Owner, SystemID: sys.ID})
	if err != nil {
		return err
	}
	out := make([]linkJSON, 0, len(ls))
	for i := range ls {
		out = append(out, toLinkJSON(&ls[i]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"links": out})
	return nil
}

func (s *Server) deleteLink(w http.ResponseWriter, r *http.Request) error {
	sys, err := s.ownSystem(r)
	if err != nil {
		return err
	}
	id := r.PathValue("link_id")
	if err := s.deps.Store.DeleteLink(r.Context(), &store.LinkDeleteParams{Owner: sys.Owner, SystemID: sys.ID, ID: id}); err != nil {
		return errNotFoundAs(err, "no link %q on system %q", id, sys.ID)
	}
	noteLink(r, sys, id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// linkRoute serves a link with no Authorization header: GET downloads (Range, archives of a
// directory), PUT uploads when the link allows write. Expired, exhausted or revoked links and
// wrong tokens are 404 alike.
func (s *Server) linkRoute(level access.Level, h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		d, err := s.access.ResolveLink(r.Context(), r.PathValue("token"), level)
		if err != nil {
			if l, lerr := s.access.LinkOf(r.Context(), r.PathValue("token")); lerr == nil && !isNotFound(err) {
				// A refusal through a real link (read-only, disabled) is its owner's to see.
				noteDecision(r.Context(), &access.Decision{Owner: l.Owner, SystemID: l.SystemID, Link: l}, l.Path)
			}
			if isNotFound(err) {
				return errStatus(http.StatusNotFound, "no such link, or it expired, was used up or was revoked")
			}
			return err
		}
		r.SetPathValue("path", strings.TrimPrefix(d.Link.Path, "/"))
		return h(w, withLinkDecision(r, d))
	}
}

// sharedSystemJSON is a system someone else shares with the caller.
type sharedSystemJSON struct {
	// ID is how the caller names it in routes and transfers: "{owner}:{id}".
	ID     string       `json:"id"`
	Owner  string       `json:"owner"`
	System string       `json:"system"`
	Paths  []sharedPath `json:"paths"`
}

type sharedPath struct {
	Path      string     `json:"path"`
	Access    string     `json:"access"`
	Via       string     `json:"via"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// sharedSystems groups the caller's unexpired grants by system.
func (s *Server) sharedSystems(r *http.Request) ([]sharedSystemJSON, error) {
	p := principal(r)
	gs, err := s.access.Shared(r.Context(), p)
	if err != nil {
		return nil, err
	}
	out := []sharedSystemJSON{}
	index := map[string]int{}
	for i := range gs {
		g := toGrantJSON(&gs[i])
		ref := access.Ref(p.User, gs[i].Owner, gs[i].SystemID)
		k, ok := index[ref]
		if !ok {
			k = len(out)
			index[ref] = k
			out = append(out, sharedSystemJSON{ID: ref, Owner: gs[i].Owner, System: gs[i].SystemID})
		}
		out[k].Paths = append(out[k].Paths, sharedPath{Path: g.Path, Access: g.Access, Via: g.Principal, ExpiresAt: g.ExpiresAt})
	}
	return out, nil
}

// noteLink records the owner's action on one of their links (made or revoked by the owner, not
// through the link).
func noteLink(r *http.Request, sys *store.System, linkID string, paths ...string) {
	noteDecision(r.Context(), &access.Decision{Owner: sys.Owner, SystemID: sys.ID}, paths...)
	if n := noteOf(r); n != nil {
		n.mu.Lock()
		n.linkID = linkID
		n.mu.Unlock()
	}
}
