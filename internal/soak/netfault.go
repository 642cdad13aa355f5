package soak

import (
	"context"
	"fmt"

	"github.com/sshapi/sshapi/internal/wanem"
)

// wanBuffer bounds what the proxy holds per direction of a connection: small, so that a
// trickling path pushes back on the sender within seconds instead of queueing minutes of data.
const wanBuffer = 256 << 10

// startWAN starts the wanem proxy (what `sshapi wanem` runs) that system b reaches its sshd
// through: no delay and no rate cap until FaultStall black-holes it or FaultTrickle slows it.
func startWAN(ctx context.Context, upstream string) (*wanem.Proxy, error) {
	p, err := wanem.New(wanem.Config{Upstream: upstream, Buffer: wanBuffer})
	if err != nil {
		return nil, fmt.Errorf("wanem: %w", err)
	}
	if err := p.Start(ctx); err != nil {
		return nil, fmt.Errorf("wanem: %w", err)
	}
	return p, nil
}
