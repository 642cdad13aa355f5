package api

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/store"
)

// An S3 system's credential: access keys, sealed like an SSH key (envelope encryption bound to
// owner, system and access key id) and never returned; GET shows the kind, the access key id
// (an identifier, not a secret) and when it was stored.

// s3CredentialFields are the access keys as PUT /v1/systems/{id}/credential takes them.
type s3CredentialFields struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token"`
}

// s3FieldSet names the first S3 credential field given, or "".
func (f s3CredentialFields) s3FieldSet() string {
	switch {
	case f.AccessKeyID != "":
		return "access_key_id"
	case f.SecretAccessKey != "":
		return "secret_access_key"
	case f.SessionToken != "":
		return "session_token"
	}
	return ""
}

// s3CredentialJSON is an S3 credential's metadata.
type s3CredentialJSON struct {
	Kind        string    `json:"kind"`
	AccessKeyID string    `json:"access_key_id"`
	CreatedAt   time.Time `json:"created_at"`
}

var accessKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._+/=-]{3,128}$`)

// putS3Credential validates, seals and stores an S3 system's access keys.
func (s *Server) putS3Credential(w http.ResponseWriter, r *http.Request, sys *store.System, req putCredentialRequest) error {
	switch {
	case req.Username != "":
		return badField("username", "is a field of SSH credentials; an S3 system takes access_key_id and secret_access_key")
	case req.PrivateKey != "":
		return badField("private_key", "is a field of SSH credentials; an S3 system takes access_key_id and secret_access_key")
	case req.Passphrase != "":
		return badField("passphrase", "is a field of SSH credentials")
	case req.Certificate != "":
		return badField("certificate", "is a field of SSH credentials")
	case req.AccessKeyID == "":
		return badField("access_key_id", "is required")
	case !accessKeyPattern.MatchString(req.AccessKeyID):
		return badField("access_key_id", "must be 3-128 characters of letters, digits and ._+/=-")
	case req.SecretAccessKey == "":
		return badField("secret_access_key", "is required")
	case len(req.SecretAccessKey) > 1024:
		return badField("secret_access_key", "must be at most 1024 characters")
	case len(req.SessionToken) > 8192:
		return badField("session_token", "must be at most 8192 characters")
	}
	plain, err := access.SealS3Keys(access.S3Keys{AccessKeyID: req.AccessKeyID, SecretAccessKey: req.SecretAccessKey, SessionToken: req.SessionToken})
	if err != nil {
		return fmt.Errorf("encode s3 credential: %w", err)
	}
	sealed, err := s.deps.Keyring.Seal(plain, access.CredentialAAD(sys.Owner, sys.ID, req.AccessKeyID))
	clear(plain)
	if err != nil {
		return fmt.Errorf("seal credential: %w", err)
	}
	cred := &store.Credential{Owner: sys.Owner, SystemID: sys.ID, Username: req.AccessKeyID, KeyType: store.CredentialS3, Sealed: sealed}
	if err := s.deps.Store.PutCredential(r.Context(), cred); err != nil {
		return err
	}
	if err := s.audit(r, "credential.put", sys.ID, "s3 "+cred.Username); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toCredentialJSON(cred))
	return nil
}

// checkS3Credential makes one cheap request with the stored keys (a one-key listing of the
// bucket's root): 200 when it succeeds; keys the server refuses are 502 naming the credential,
// a missing bucket 404 naming the bucket, an unreachable endpoint 503 (see storageProblem).
func (s *Server) checkS3Credential(w http.ResponseWriter, r *http.Request, sys *store.System) error {
	owner := principal(r).User
	if err := s.limits.allowCheck(owner, "s3\x00"+sys.ID, time.Now()); err != nil {
		return err
	}
	d, err := s.access.Resolve(r.Context(), access.Request{Caller: principal(r), System: sys.ID, Level: access.Read})
	if err != nil {
		return err
	}
	noteDecision(r.Context(), d)
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := d.Storage.List(ctx, "/", "", 1); err != nil {
		return objErr(err)
	}
	writeJSON(w, http.StatusOK, checkResult{OK: true, LatencyMS: time.Since(start).Milliseconds()})
	return nil
}
