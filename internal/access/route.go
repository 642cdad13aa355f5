package access

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sshapi/sshapi/internal/store"
)

// CheckRoute checks how sys will be reached: its jump host must be another of the owner's
// systems without a cycle back to sys and at most MaxJumpHops deep; a system reached directly
// must have a host the network policy allows. Refusals are *FieldError.
func (r *Resolver) CheckRoute(ctx context.Context, sys *store.System) error {
	if sys.KindOf() == store.KindS3 {
		host, err := EndpointHost(sys.Endpoint)
		if err != nil {
			return &FieldError{Field: "endpoint", Message: err.Error()}
		}
		if err := r.deps.Network.CheckHost(host); err != nil {
			return &FieldError{Field: "endpoint", Message: err.Error()}
		}
		return nil
	}
	if sys.Jump == "" {
		if err := r.deps.Network.CheckHost(sys.Host); err != nil {
			return &FieldError{Field: "host", Message: err.Error()}
		}
		return nil
	}
	seen := []string{sys.ID}
	for id := sys.Jump; id != ""; {
		if slices.Contains(seen, id) {
			return &FieldError{Field: "jump", Message: fmt.Sprintf("%q would make a loop of jump hosts (%s)", sys.Jump, strings.Join(append(seen, id), " -> "))}
		}
		if len(seen) > MaxJumpHops {
			return &FieldError{Field: "jump", Message: fmt.Sprintf("a chain of more than %d jump hosts is not supported", MaxJumpHops)}
		}
		j, err := r.deps.Store.GetSystem(ctx, sys.Owner, id)
		if errors.Is(err, store.ErrNotFound) {
			return &FieldError{Field: "jump", Message: fmt.Sprintf("no system %q for this user", id)}
		}
		if err != nil {
			return err
		}
		if j.KindOf() == store.KindS3 {
			return &FieldError{Field: "jump", Message: fmt.Sprintf("%q is an S3 bucket, not an SSH host", id)}
		}
		seen = append(seen, id)
		id = j.Jump
	}
	return nil
}
