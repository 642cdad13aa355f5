package api

import (
	"errors"
	"net/http"

	"github.com/sshapi/sshapi/internal/store"
)

// The routes of the published SSH-API study (Tapis/TACC), kept compatible so its clients and its
// Locust load test work unchanged. A "named credential" is a system plus the caller's credential.

func (s *Server) paperWelcome(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{
		"message": "Welcome to sshapi: run commands on HPC systems over SSH. GET /sshapi/v2 lists your named credentials, POST /sshapi/v2 adds one, POST /sshapi/v2/{name} runs a command. The full API is at /v1 (see /openapi.json).",
		"version": s.deps.Version,
	})
	return nil
}

type paperCredential struct {
	Name     string `json:"name"`
	Hostname string `json:"hostname"`
	Port     int    `json:"port"`
	Username string `json:"username"`
}

func (s *Server) paperList(w http.ResponseWriter, r *http.Request) error {
	owner := principal(r).User
	systems, err := s.deps.Store.ListSystems(r.Context(), owner)
	if err != nil {
		return err
	}
	out := []paperCredential{}
	for _, sys := range systems {
		if sys.KindOf() != store.KindSSH {
			continue // a named credential is an SSH login
		}
		cred, err := s.deps.Store.GetCredential(r.Context(), owner, sys.ID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		out = append(out, paperCredential{Name: sys.ID, Hostname: sys.Host, Port: sys.Port, Username: cred.Username})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type paperCreateRequest struct {
	Name            string `json:"name"`
	Hostname        string `json:"hostname"`
	Port            int    `json:"port"`
	Username        string `json:"username"`
	PrivateKey      string `json:"private_key"`
	Passphrase      string `json:"passphrase"`
	HostKey         string `json:"host_key"`
	TrustOnFirstUse bool   `json:"trust_on_first_use"`
	MaxSessions     int    `json:"max_sessions"`
}

func (s *Server) paperCreate(w http.ResponseWriter, r *http.Request) error {
	var req paperCreateRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	owner := principal(r).User
	sys := &store.System{Owner: owner, ID: req.Name, Host: req.Hostname, Port: req.Port, TrustOnFirstUse: req.TrustOnFirstUse, MaxSessions: req.MaxSessions}
	if req.HostKey != "" {
		sys.HostKeys = []string{req.HostKey}
	}
	if err := s.checkSystem(r.Context(), sys); err != nil {
		return renameFields(err, map[string]string{"id": "name", "host": "hostname", "host_keys": "host_key"})
	}
	cr := putCredentialRequest{Username: req.Username, PrivateKey: req.PrivateKey, Passphrase: req.Passphrase}
	if _, _, err := s.checkedCredential(r.Context(), owner, cr); err != nil { // validate before creating anything
		return err
	}
	if err := s.deps.Store.CreateSystemAtMost(r.Context(), &store.SystemCreateParams{System: sys, Max: s.limits.maxSystemsPerOwner}); err != nil {
		return err
	}
	cred, err := s.storeCredential(r, owner, sys.ID, cr)
	if err != nil {
		_ = s.deps.Store.DeleteSystem(r.Context(), owner, sys.ID) // leave nothing half-made
		return err
	}
	if err := s.audit(r, "system.create", sys.ID, sys.Host); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, paperCredential{Name: sys.ID, Hostname: sys.Host, Port: sys.Port, Username: cred.Username})
	return nil
}

// renameFields reports validation errors under the paper route's field names.
func renameFields(err error, names map[string]string) error {
	var he *httpError
	if !errors.As(err, &he) {
		return err
	}
	for i, f := range he.fields {
		if n, ok := names[f.Field]; ok {
			he.fields[i].Field = n
			he.detail = n + he.detail[len(f.Field):]
		}
	}
	return he
}
