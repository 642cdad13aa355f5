package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/access"
	"github.com/sshapi/sshapi/internal/store"
)

// The SSH algorithm names a system may ask for: what golang.org/x/crypto/ssh implements.
var (
	cipherNames = algorithmNames(ssh.SupportedAlgorithms().Ciphers, ssh.InsecureAlgorithms().Ciphers)
	kexNames    = algorithmNames(ssh.SupportedAlgorithms().KeyExchanges, ssh.InsecureAlgorithms().KeyExchanges)
)

func algorithmNames(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkAlgorithms refuses names the SSH library does not implement, and duplicates.
func checkAlgorithms(field string, names, known []string) error {
	if len(names) > len(known) {
		return badField(field, "lists %d algorithms; at most %d exist", len(names), len(known))
	}
	for i, n := range names {
		if !slices.Contains(known, n) {
			return badField(field, "entry %d (%q) is not supported; choose from %s", i, n, strings.Join(known, ", "))
		}
		if slices.Contains(names[:i], n) {
			return badField(field, "entry %d (%q) is listed twice", i, n)
		}
	}
	return nil
}

// checkSystem is the one registration check of a system's definition, on every route that
// creates or changes one (POST and PATCH /v1/systems, POST /sshapi/v2): its fields
// (validateSystem, which fills defaults) and how it will be reached (checkRoute: the jump
// chain, and the network policy for its host).
func (s *Server) checkSystem(ctx context.Context, sys *store.System) error {
	if err := validateSystem(sys); err != nil {
		return err
	}
	return s.checkRoute(ctx, sys)
}

// checkRoute checks how sys will be reached (jump chain, network policy); see
// access.CheckRoute.
func (s *Server) checkRoute(ctx context.Context, sys *store.System) error {
	err := s.access.CheckRoute(ctx, sys)
	var fe *access.FieldError
	if errors.As(err, &fe) {
		return badField(fe.Field, "%s", fe.Message)
	}
	return err
}

// checkNotJumpOfOthers refuses to delete a system that other systems reach theirs through.
func (s *Server) checkNotJumpOfOthers(ctx context.Context, owner, id string) error {
	all, err := s.deps.Store.ListSystems(ctx, owner)
	if err != nil {
		return err
	}
	var users []string
	for _, x := range all {
		if x.Jump == id {
			users = append(users, x.ID)
		}
	}
	if len(users) > 0 {
		return errStatus(http.StatusConflict, "system %q is the jump host of %s: change their jump first", id, strings.Join(users, ", "))
	}
	return nil
}
