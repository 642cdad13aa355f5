package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/store"
)

// maxJumpHops bounds a chain of jump hosts (a jump host may itself have one).
const maxJumpHops = 4

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

// checkRoute checks how sys will be reached: its jump host must be another of the owner's systems
// without a cycle back to sys and at most maxJumpHops deep; a system reached directly must have
// a host the network policy allows.
func (s *Server) checkRoute(ctx context.Context, sys *store.System) error {
	if sys.Jump == "" {
		if err := s.deps.Network.CheckHost(sys.Host); err != nil {
			return badField("host", "%v", err)
		}
		return nil
	}
	seen := []string{sys.ID}
	for id := sys.Jump; id != ""; {
		if slices.Contains(seen, id) {
			return badField("jump", "%q would make a loop of jump hosts (%s)", sys.Jump, strings.Join(append(seen, id), " -> "))
		}
		if len(seen) > maxJumpHops {
			return badField("jump", "a chain of more than %d jump hosts is not supported", maxJumpHops)
		}
		j, err := s.deps.Store.GetSystem(ctx, sys.Owner, id)
		if errors.Is(err, store.ErrNotFound) {
			return badField("jump", "no system %q for this user", id)
		}
		if err != nil {
			return err
		}
		seen = append(seen, id)
		id = j.Jump
	}
	return nil
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
