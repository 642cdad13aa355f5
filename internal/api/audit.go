package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// auditJSON is one audit log entry as the API shows it. It never holds a secret: no key, no
// token, no query string.
type auditJSON struct {
	Seq       int64     `json:"seq"`
	Time      time.Time `json:"time"`
	Principal string    `json:"principal"`
	Owner     string    `json:"owner"`
	Action    string    `json:"action"`
	SystemID  string    `json:"system,omitempty"`
	Paths     []string  `json:"paths,omitempty"`
	Status    int       `json:"status,omitempty"`
	Bytes     int64     `json:"bytes"`
	RequestID string    `json:"request_id,omitempty"`
	LinkID    string    `json:"link_id,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

func toAuditJSON(e *store.AuditEntry) auditJSON {
	owner := e.SystemOwner
	if owner == "" {
		owner = e.Owner
	}
	return auditJSON{Seq: e.Seq, Time: e.Time, Principal: e.Owner, Owner: owner, Action: e.Action, SystemID: e.SystemID,
		Paths: e.Paths, Status: e.Status, Bytes: e.Bytes, RequestID: e.RequestID, LinkID: e.LinkID, Detail: e.Detail}
}

// auditQuery reads the filters shared by /v1/audit and /v1/admin/audit.
func auditQuery(r *http.Request) (store.AuditQueryParams, error) {
	q := r.URL.Query()
	p := store.AuditQueryParams{System: q.Get("system"), PathPrefix: q.Get("path_prefix"), Principal: q.Get("principal"),
		SystemOwner: q.Get("owner")}
	var err error
	if p.Limit, err = queryInt(r, "limit", store.DefaultAuditLimit, 1, 1000); err != nil {
		return p, err
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return p, badField("before", "must be a positive integer (a next_before from the previous page)")
		}
		p.BeforeSeq = n
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &p.Since}, {"until", &p.Until}} {
		if v := q.Get(t.name); v != "" {
			if *t.dst, err = time.Parse(time.RFC3339, v); err != nil {
				return p, badField(t.name, "must be an RFC 3339 time")
			}
		}
	}
	return p, nil
}

// listAudit shows the caller's own actions and every action on systems they own (their
// grantees' and links' included), newest first, paged with before=; NDJSON with
// Accept: application/x-ndjson.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	p, err := auditQuery(r)
	if err != nil {
		return err
	}
	p.Visible = principal(r).User
	return s.serveAudit(w, r, p)
}

// adminAudit is listAudit across all users, for operators.
func (s *Server) adminAudit(w http.ResponseWriter, r *http.Request) error {
	if err := requireOperator(r); err != nil {
		return err
	}
	p, err := auditQuery(r)
	if err != nil {
		return err
	}
	return s.serveAudit(w, r, p)
}

func requireOperator(r *http.Request) error {
	if !principal(r).Operator {
		return errStatus(http.StatusForbidden, "operators only")
	}
	return nil
}

func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request, p store.AuditQueryParams) error {
	s.access.FlushAudit(r.Context()) // the caller's own last actions are there
	if sp := s.auditTo.spool.Load(); sp != nil && sp.Pending() > 0 {
		_, _ = sp.Drain(r.Context()) // and those spooled while the database was away, if it is back
	}
	entries, err := s.deps.Store.QueryAudit(r.Context(), &p)
	if err != nil {
		return err
	}
	if wantsNDJSON(r) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		for i := range entries {
			if err := enc.Encode(toAuditJSON(&entries[i])); err != nil {
				return nil // the client went away
			}
		}
		return nil
	}
	out := make([]auditJSON, 0, len(entries))
	for i := range entries {
		out = append(out, toAuditJSON(&entries[i]))
	}
	body := map[string]any{"entries": out}
	if len(entries) == p.Limit {
		body["next_before"] = entries[len(entries)-1].Seq
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// adminSystems lists every user's systems, with whether an operator disabled them.
func (s *Server) adminSystems(w http.ResponseWriter, r *http.Request) error {
	if err := requireOperator(r); err != nil {
		return err
	}
	all, err := s.deps.Store.ListAllSystems(r.Context())
	if err != nil {
		return err
	}
	type adminSystem struct {
		Owner    string `json:"owner"`
		ID       string `json:"id"`
		Kind     string `json:"kind"`
		Host     string `json:"host,omitempty"`
		Port     int    `json:"port,omitempty"`
		Endpoint string `json:"endpoint,omitempty"`
		Bucket   string `json:"bucket,omitempty"`
		Disabled bool   `json:"disabled"`
	}
	out := make([]adminSystem, 0, len(all))
	for _, x := range all {
		off, err := s.deps.Store.IsDisabled(r.Context(), &store.DisabledParams{Owner: x.Owner, SystemID: x.ID})
		if err != nil {
			return err
		}
		out = append(out, adminSystem{Owner: x.Owner, ID: x.ID, Kind: x.KindOf(), Host: x.Host, Port: x.Port,
			Endpoint: x.Endpoint, Bucket: x.Bucket, Disabled: off})
	}
	writeJSON(w, http.StatusOK, map[string]any{"systems": out})
	return nil
}

type disableRequest struct {
	Disabled bool `json:"disabled"`
}

// adminDisable disables or re-enables a user ({user}) or one system ({user}/{id}): their
// requests, links, grants and transfers are refused from the next request or range on.
func (s *Server) adminDisable(w http.ResponseWriter, r *http.Request) error {
	if err := requireOperator(r); err != nil {
		return err
	}
	var req disableRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	p := store.DisabledParams{Owner: r.PathValue("user"), SystemID: r.PathValue("system"), Disabled: req.Disabled}
	if p.SystemID != "" {
		if _, err := s.deps.Store.GetSystem(r.Context(), p.Owner, p.SystemID); err != nil {
			return errNotFoundAs(err, "no system %q of user %q", p.SystemID, p.Owner)
		}
	}
	if err := s.access.SetDisabled(r.Context(), &p); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"user": p.Owner, "system": p.SystemID, "disabled": p.Disabled})
	return nil
}
