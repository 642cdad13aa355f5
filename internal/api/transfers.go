package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/store"
	"github.com/sshapi/sshapi/internal/transfer"
)

// Transfers is what the API needs from the transfer engine; *transfer.Engine implements it.
type Transfers interface {
	Submit(ctx context.Context, owner string, req transfer.Request) (*transfer.Transfer, bool, error)
	Get(ctx context.Context, owner, id string) (*transfer.Transfer, error)
	List(ctx context.Context, owner string, status transfer.Status, limit int) ([]transfer.Transfer, error)
	Items(ctx context.Context, owner, id string, after int64, limit int, status transfer.ItemStatus) ([]transfer.Item, error)
	Cancel(ctx context.Context, owner, id string) (*transfer.Transfer, error)
	// Closing is closed when the service begins to shut down; event streams end then.
	Closing() <-chan struct{}
}

// sseInterval is how often the events stream looks for progress; sseKeepalive how often an idle
// stream sends a comment so proxies keep it open.
const (
	sseInterval  = 250 * time.Millisecond
	sseKeepalive = 15 * time.Second
)

// TransferResolver returns the resolver the transfer engine uses to reach systems when a run
// starts and before each round and range: access decides, with the same credentials, host key
// policy, root directory and grants as the API.
func (s *Server) TransferResolver() transfer.Resolver { return s.access.TransferResolver() }

func (s *Server) transfers() (Transfers, error) {
	if s.deps.Transfers == nil {
		return nil, errStatus(http.StatusServiceUnavailable, "transfers are not enabled on this server")
	}
	return s.deps.Transfers, nil
}

// transferErr maps the engine's errors to problems.
func transferErr(id string, err error) error {
	var fe *transfer.FieldError
	switch {
	case errors.As(err, &fe):
		return badField(fe.Field, "%s", fe.Message)
	case errors.Is(err, transfer.ErrNotFound):
		return errStatus(http.StatusNotFound, "no transfer %q for this user", id)
	case errors.Is(err, transfer.ErrConflict):
		return &httpError{status: http.StatusConflict, detail: err.Error()}
	case errors.Is(err, transfer.ErrQuota):
		return &httpError{status: http.StatusTooManyRequests, retryAfter: 30, detail: err.Error()}
	}
	return err
}

func (s *Server) createTransfer(w http.ResponseWriter, r *http.Request) error {
	tr, err := s.transfers()
	if err != nil {
		return err
	}
	var req transfer.Request
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	// "~" and "~/x" mean the home directory, as in every other JSON body (bodyPath).
	for _, ep := range []struct {
		field string
		path  *string
	}{{"source.path", &req.Source.Path}, {"destination.path", &req.Destination.Path}} {
		if *ep.path == "" {
			continue // Validate names the missing field
		}
		p, err := bodyPath(ep.field, *ep.path)
		if err != nil {
			return err
		}
		*ep.path = p
	}
	if err := req.Validate(time.Now()); err != nil {
		return transferErr("", err)
	}
	p := principal(r)
	owner := p.User
	var ends [2]auditTarget
	for i, ep := range []struct {
		role  string
		ep    transfer.Endpoint
		level access.Level
	}{{"source", req.Source, access.Read}, {"destination", req.Destination, access.Write}} {
		d, err := s.access.Resolve(r.Context(), access.Request{Caller: p, System: ep.ep.System, Level: ep.level, Paths: []string{ep.ep.Path}})
		noteRefusal(r.Context(), p.User, ep.ep.System, err, ep.ep.Path)
		var ae *access.Error
		switch {
		case errors.Is(err, store.ErrNotFound):
			return errStatus(http.StatusNotFound, "%s system %q not found for this user", ep.role, ep.ep.System)
		case errors.As(err, &ae):
			pr, _ := accessProblem(err)
			return errStatus(pr.Status, "%s %s", ep.role, ae.Detail)
		case err != nil:
			return err
		}
		ends[i] = auditTarget{systemOwner: d.Owner, system: d.SystemID, paths: []string{ep.ep.Path}}
	}
	noteTransferEnds(r, owner, ends)
	t, created, err := tr.Submit(r.Context(), owner, req)
	if err != nil {
		return transferErr("", err)
	}
	w.Header().Set("Location", "/v1/transfers/"+t.ID)
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK // an earlier submission with the same idempotency key
	}
	writeJSON(w, status, t)
	return nil
}

// noteTransferEnds records the systems a transfer submitted by caller acts on. The entry names
// the shared end if there is one, so its owner sees the transfer, with both paths. When the
// two ends are shared systems of two other owners, each owner gets an entry of their own,
// naming their system and only their path: the source's owner sees her files copied out, and
// neither sees the other's paths.
func noteTransferEnds(r *http.Request, caller string, ends [2]auditTarget) {
	n := noteOf(r)
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	src, dst := ends[0], ends[1]
	if src.systemOwner != caller && dst.systemOwner != caller && src.systemOwner != dst.systemOwner {
		n.systemOwner, n.system, n.paths = dst.systemOwner, dst.system, dst.paths
		n.others = append(n.others, src)
		return
	}
	main := src
	if dst.systemOwner != caller {
		main = dst
	}
	n.systemOwner, n.system = main.systemOwner, main.system
	n.paths = append(n.paths, src.paths[0], dst.paths[0])
}

func (s *Server) listTransfers(w http.ResponseWriter, r *http.Request) error {
	tr, err := s.transfers()
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 100, 1, 1000)
	if err != nil {
		return err
	}
	ts, err := tr.List(r.Context(), principal(r).User, transfer.Status(r.URL.Query().Get("status")), limit)
	if err != nil {
		return transferErr("", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"transfers": ts})
	return nil
}

func (s *Server) getTransfer(w http.ResponseWriter, r *http.Request) error {
	tr, err := s.transfers()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	t, err := tr.Get(r.Context(), principal(r).User, id)
	if err != nil {
		return transferErr(id, err)
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *Server) listTransferItems(w http.ResponseWriter, r *http.Request) error {
	tr, err := s.transfers()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	limit, err := queryInt(r, "limit", 1000, 1, 10000)
	if err != nil {
		return err
	}
	after, err := queryInt(r, "after", -1, -1, 1<<62-1)
	if err != nil {
		return err
	}
	items, err := tr.Items(r.Context(), principal(r).User, id, int64(after), limit, transfer.ItemStatus(r.URL.Query().Get("status")))
	if err != nil {
		return transferErr(id, err)
	}
	body := map[string]any{"items": items}
	if len(items) == limit {
		body["next_after"] = items[len(items)-1].Seq
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// transferEvents streams the transfer's state as Server-Sent Events: a "progress" event whenever
// it changes and a final "done" event when it has finished.
func (s *Server) transferEvents(w http.ResponseWriter, r *http.Request) error {
	tr, err := s.transfers()
	if err != nil {
		return err
	}
	id, owner := r.PathValue("id"), principal(r).User
	t, err := tr.Get(r.Context(), owner, id)
	if err != nil {
		return transferErr(id, err)
	}
	release, err := s.limits.streams.acquire(owner)
	if err != nil {
		return err
	}
	defer release()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var last []byte
	lastSent := time.Now()
	tick := time.NewTicker(sseInterval)
	defer tick.Stop()
	for {
		b, _ := json.Marshal(t)
		switch {
		case t.Status.Terminal():
			_, err := fmt.Fprintf(w, "event: done\ndata: %s\n\n", b)
			_ = rc.Flush()
			return err
		case string(b) != string(last):
			if _, err := fmt.Fprintf(w, "event: progress\ndata: %s\n\n", b); err != nil {
				return nil // the client went away
			}
			last, lastSent = b, time.Now()
			_ = rc.Flush()
		case time.Since(lastSent) > sseKeepalive:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return nil
			}
			lastSent = time.Now()
			_ = rc.Flush()
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-tr.Closing():
			// The service is shutting down: end the stream so the server can drain; clients
			// reconnect (EventSource does so by itself) to an instance that is up.
			_, _ = fmt.Fprint(w, "event: shutdown\ndata: {}\n\n")
			_ = rc.Flush()
			return nil
		case <-tick.C:
		}
		if t, err = tr.Get(r.Context(), owner, id); err != nil {
			if r.Context().Err() != nil {
				return nil
			}
			_, _ = fmt.Fprintf(w, "event: error\ndata: %q\n\n", "transfer state unavailable")
			return err
		}
	}
}

func (s *Server) cancelTransfer(w http.ResponseWriter, r *http.Request) error {
	tr, err := s.transfers()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	t, err := tr.Cancel(ctx, principal(r).User, id)
	if err != nil {
		return transferErr(id, err)
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}
