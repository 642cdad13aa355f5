package api

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/store"
)

// systemFields are a system's settings as the API accepts them (POST): an SSH system's, or with
// kind "s3" a bucket's (see validateS3System).
type systemFields struct {
	ID                  string   `json:"id"`
	Kind                string   `json:"kind,omitempty"`
	Host                string   `json:"host"`
	Port                int      `json:"port"`
	HostKeys            []string `json:"host_keys"`
	HostKeyFingerprints []string `json:"host_key_fingerprints"`
	TrustOnFirstUse     bool     `json:"trust_on_first_use"`
	MaxSessions         int      `json:"max_sessions"`
	RootDir             string   `json:"root_dir,omitempty"`
	Description         string   `json:"description"`
	Jump                string   `json:"jump,omitempty"`
	Ciphers             []string `json:"ciphers,omitempty"`
	KeyExchanges        []string `json:"kex,omitempty"`
	s3Fields
}

// s3Fields are an S3 system's settings.
type s3Fields struct {
	Endpoint  string `json:"endpoint,omitempty"`
	Region    string `json:"region,omitempty"`
	Bucket    string `json:"bucket,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	PathStyle bool   `json:"path_style,omitempty"`
}

// system turns the fields into the owner's store.System.
func (f systemFields) system(owner string) *store.System {
	return &store.System{Owner: owner, ID: f.ID, Kind: f.Kind, Host: f.Host, Port: f.Port, HostKeys: f.HostKeys,
		HostKeyFingerprints: f.HostKeyFingerprints, TrustOnFirstUse: f.TrustOnFirstUse, MaxSessions: f.MaxSessions,
		RootDir: f.RootDir, Description: f.Description, Jump: f.Jump, Ciphers: f.Ciphers, KeyExchanges: f.KeyExchanges,
		Endpoint: f.Endpoint, Region: f.Region, Bucket: f.Bucket, Prefix: f.Prefix, PathStyle: f.PathStyle}
}

// sshSystemJSON is what an SSH system shows beyond what every system shows.
type sshSystemJSON struct {
	Host                string   `json:"host"`
	Port                int      `json:"port"`
	HostKeys            []string `json:"host_keys"`
	HostKeyFingerprints []string `json:"host_key_fingerprints"`
	TrustOnFirstUse     bool     `json:"trust_on_first_use"`
	MaxSessions         int      `json:"max_sessions"`
	RootDir             string   `json:"root_dir,omitempty"`
	Jump                string   `json:"jump,omitempty"`
	Ciphers             []string `json:"ciphers,omitempty"`
	KeyExchanges        []string `json:"kex,omitempty"`
}

// s3SystemJSON is what an S3 system shows beyond what every system shows.
type s3SystemJSON struct {
	Endpoint  string `json:"endpoint"`
	Region    string `json:"region"`
	Bucket    string `json:"bucket"`
	Prefix    string `json:"prefix"`
	PathStyle bool   `json:"path_style"`
}

// systemJSON is a system as the API shows it: its kind's fields and what its storage can do.
type systemJSON struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	*sshSystemJSON
	*s3SystemJSON
	Description   string               `json:"description"`
	Capabilities  storage.Capabilities `json:"capabilities"`
	HasCredential *bool                `json:"has_credential,omitempty"`
	CreatedAt     time.Time            `json:"created_at"`
	UpdatedAt     time.Time            `json:"updated_at"`
}

func toSystemJSON(s *store.System) systemJSON {
	j := systemJSON{ID: s.ID, Kind: s.KindOf(), Description: s.Description, Capabilities: access.Capabilities(s.KindOf()),
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
	if j.Kind == store.KindS3 {
		j.s3SystemJSON = &s3SystemJSON{Endpoint: s.Endpoint, Region: s.Region, Bucket: s.Bucket, Prefix: s.Prefix, PathStyle: s.PathStyle}
		return j
	}
	j.sshSystemJSON = &sshSystemJSON{Host: s.Host, Port: s.Port, HostKeys: s.HostKeys,
		HostKeyFingerprints: s.HostKeyFingerprints, TrustOnFirstUse: s.TrustOnFirstUse, MaxSessions: s.MaxSessions,
		RootDir: s.RootDir, Jump: s.Jump, Ciphers: s.Ciphers, KeyExchanges: s.KeyExchanges}
	if j.HostKeys == nil {
		j.HostKeys = []string{}
	}
	if j.HostKeyFingerprints == nil {
		j.HostKeyFingerprints = []string{}
	}
	return j
}

var (
	idPattern          = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	fingerprintPattern = regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}$`)
	hostPattern        = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?$`)
)

// validateSystem checks a system's fields and fills defaults.
func validateSystem(s *store.System) error {
	if !idPattern.MatchString(s.ID) {
		return badField("id", "must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	switch s.Kind {
	case "", store.KindSSH:
		s.Kind = store.KindSSH
	case store.KindS3:
		return validateS3System(s)
	default:
		return badField("kind", "must be ssh or s3")
	}
	if f := s3FieldSet(s); f != "" {
		return badField(f, "is a field of S3 systems (kind s3), not of SSH systems")
	}
	s.Host = strings.TrimSuffix(strings.TrimPrefix(s.Host, "["), "]")
	if s.Host == "" {
		return badField("host", "is required")
	}
	if !hostPattern.MatchString(s.Host) || len(s.Host) > 253 {
		return badField("host", "must be a hostname or IP address")
	}
	if s.Port == 0 {
		s.Port = 22
	}
	if s.Port < 1 || s.Port > 65535 {
		return badField("port", "must be between 1 and 65535")
	}
	if s.MaxSessions == 0 {
		s.MaxSessions = 10
	}
	if s.MaxSessions < 1 || s.MaxSessions > 1000 {
		return badField("max_sessions", "must be between 1 and 1000 (the server's MaxSessions)")
	}
	keys, err := sshpool.NormalizeHostKeys(s.HostKeys)
	if err != nil {
		return badField("host_keys", "%v", err)
	}
	s.HostKeys = keys
	for i, f := range s.HostKeyFingerprints {
		if !fingerprintPattern.MatchString(f) {
			return badField("host_key_fingerprints", "entry %d is not a SHA256 fingerprint like SHA256:<43 base64 characters> (ssh-keygen -lf)", i)
		}
	}
	if len(s.HostKeys) == 0 && len(s.HostKeyFingerprints) == 0 && !s.TrustOnFirstUse {
		return badField("host_keys", "give host_keys or host_key_fingerprints (from ssh-keyscan / ssh-keygen -lf), or set trust_on_first_use to true explicitly")
	}
	if s.RootDir != "" && !strings.HasPrefix(s.RootDir, "/") {
		return badField("root_dir", "must be an absolute path")
	}
	if len(s.Description) > 1000 {
		return badField("description", "must be at most 1000 characters")
	}
	if s.Jump != "" && !idPattern.MatchString(s.Jump) {
		return badField("jump", "must be the id of another of your systems")
	}
	if s.Jump == s.ID {
		return badField("jump", "a system cannot be its own jump host")
	}
	if err := checkAlgorithms("ciphers", s.Ciphers, cipherNames); err != nil {
		return err
	}
	return checkAlgorithms("kex", s.KeyExchanges, kexNames)
}

func (s *Server) createSystem(w http.ResponseWriter, r *http.Request) error {
	var req systemFields
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	sys := req.system(principal(r).User)
	if err := s.checkSystem(r.Context(), sys); err != nil {
		return err
	}
	if err := s.deps.Store.CreateSystemAtMost(r.Context(), &store.SystemCreateParams{System: sys, Max: s.limits.maxSystemsPerOwner}); err != nil {
		return err
	}
	if err := s.audit(r, "system.create", sys.ID, systemAddress(sys)); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/systems/"+sys.ID)
	writeJSON(w, http.StatusCreated, toSystemJSON(sys))
	return nil
}

func (s *Server) listSystems(w http.ResponseWriter, r *http.Request) error {
	systems, err := s.deps.Store.ListSystems(r.Context(), principal(r).User)
	if err != nil {
		return err
	}
	out := make([]systemJSON, 0, len(systems))
	for i := range systems {
		out = append(out, toSystemJSON(&systems[i]))
	}
	shared, err := s.sharedSystems(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"systems": out, "shared": shared})
	return nil
}

func (s *Server) getSystem(w http.ResponseWriter, r *http.Request) error {
	sys, err := s.deps.Store.GetSystem(r.Context(), principal(r).User, r.PathValue("id"))
	if err != nil {
		return err
	}
	j := toSystemJSON(sys)
	_, cerr := s.deps.Store.GetCredential(r.Context(), sys.Owner, sys.ID)
	has := cerr == nil
	j.HasCredential = &has
	writeJSON(w, http.StatusOK, j)
	return nil
}

// patchSystemRequest has pointer fields: only the fields present change.
type patchSystemRequest struct {
	Host                *string   `json:"host"`
	Port                *int      `json:"port"`
	HostKeys            *[]string `json:"host_keys"`
	HostKeyFingerprints *[]string `json:"host_key_fingerprints"`
	TrustOnFirstUse     *bool     `json:"trust_on_first_use"`
	MaxSessions         *int      `json:"max_sessions"`
	RootDir             *string   `json:"root_dir"`
	Description         *string   `json:"description"`
	Jump                *string   `json:"jump"`
	Ciphers             *[]string `json:"ciphers"`
	KeyExchanges        *[]string `json:"kex"`
	Kind                *string   `json:"kind"`
	Endpoint            *string   `json:"endpoint"`
	Region              *string   `json:"region"`
	Bucket              *string   `json:"bucket"`
	Prefix              *string   `json:"prefix"`
	PathStyle           *bool     `json:"path_style"`
}

func (s *Server) patchSystem(w http.ResponseWriter, r *http.Request) error {
	var req patchSystemRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	// Read-modify-write with a conditional update: a concurrent change (another PATCH, a host
	// key pinned on first use) is never lost; the patch is re-applied to the fresh row.
	var sys *store.System
	var err error
	for attempt := 0; ; attempt++ {
		sys, err = s.applyPatch(r, req)
		if !errors.Is(err, store.ErrConflict) || attempt == 4 {
			break
		}
	}
	if err != nil {
		return err
	}
	s.deps.Pool.Forget(access.PoolSystem(sys.Owner, sys.ID))
	s.access.Forget(sys.Owner, sys.ID) // the old version is parsed no more
	if err := s.audit(r, "system.update", sys.ID, ""); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSystemJSON(sys))
	return nil
}

// applyPatch applies req to the stored system and saves it if nobody changed it meanwhile
// (store.ErrConflict otherwise).
func (s *Server) applyPatch(r *http.Request, req patchSystemRequest) (*store.System, error) {
	sys, err := s.deps.Store.GetSystem(r.Context(), principal(r).User, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	if req.Kind != nil && *req.Kind != sys.KindOf() {
		return nil, badField("kind", "cannot change (the system is %s): register a new system instead", sys.KindOf())
	}
	set(&sys.Endpoint, req.Endpoint)
	set(&sys.Region, req.Region)
	set(&sys.Bucket, req.Bucket)
	set(&sys.Prefix, req.Prefix)
	if req.PathStyle != nil {
		sys.PathStyle = *req.PathStyle
	}
	set(&sys.Host, req.Host)
	set(&sys.RootDir, req.RootDir)
	set(&sys.Description, req.Description)
	set(&sys.Jump, req.Jump)
	if req.Ciphers != nil {
		sys.Ciphers = *req.Ciphers
	}
	if req.KeyExchanges != nil {
		sys.KeyExchanges = *req.KeyExchanges
	}
	if req.Port != nil {
		sys.Port = *req.Port
	}
	if req.HostKeys != nil {
		sys.HostKeys = *req.HostKeys
	}
	if req.HostKeyFingerprints != nil {
		sys.HostKeyFingerprints = *req.HostKeyFingerprints
	}
	if req.TrustOnFirstUse != nil {
		sys.TrustOnFirstUse = *req.TrustOnFirstUse
	}
	if req.MaxSessions != nil {
		sys.MaxSessions = *req.MaxSessions
	}
	if err := s.checkSystem(r.Context(), sys); err != nil {
		return nil, err
	}
	if err := s.deps.Store.UpdateSystem(r.Context(), sys); err != nil {
		return nil, err
	}
	return sys, nil
}

func (s *Server) deleteSystem(w http.ResponseWriter, r *http.Request) error {
	p := principal(r)
	id := r.PathValue("id")
	if err := s.checkNotJumpOfOthers(r.Context(), p.User, id); err != nil {
		return err
	}
	if err := s.deps.Store.DeleteSystem(r.Context(), p.User, id); err != nil {
		return err
	}
	s.deps.Pool.Forget(access.PoolSystem(p.User, id))
	s.access.Forget(p.User, id)
	if err := s.audit(r, "system.delete", id, ""); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func principal(r *http.Request) auth.Principal {
	p, _ := auth.FromContext(r.Context())
	return p
}

// audit records a security-relevant action and returns once its entry is committed (sharing
// the commit with concurrent requests). The action has already happened when it fails: the
// error answers 500 saying so, rather than acknowledge an action the audit cannot show.
func (s *Server) audit(r *http.Request, action, system, detail string) error {
	e := store.AuditEntry{Owner: principal(r).User, Action: action, SystemID: system, Detail: detail}
	if err := s.recordAudit(r.Context(), e); err != nil {
		return &httpError{status: http.StatusInternalServerError, err: err,
			detail: action + " was carried out but its audit entry could not be recorded; see the server log"}
	}
	return nil
}

// fingerprint is the SHA256 fingerprint of k.
func fingerprint(k ssh.PublicKey) string { return ssh.FingerprintSHA256(k) }
