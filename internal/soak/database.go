package soak

import (
	"context"
	"fmt"

	"github.com/sshapi/sshapi/internal/pgtest"
)

// pgOptions are the soak's database settings: durable commits, as in production (the tests'
// default is off), and enough WAL kept for a replica that was away during a restart to catch up.
var pgOptions = pgtest.Options{Durable: true, Settings: []string{"wal_keep_size=256MB"}}

// startDatabase starts the primary, creates the soak's database and, when the failover is
// scheduled, a streaming replica of it. It returns the URL the instances are given: with a
// replica, both servers with target_session_attrs=read-write, so that each new connection finds
// whichever is the primary.
func (r *run) startDatabase(ctx context.Context) (string, error) {
	var err error
	if r.pg, err = pgtest.StartWith(ctx, pgOptions); err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	dsn, err := r.pg.CreateDatabase(ctx, "soak")
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	r.logf("postgres on 127.0.0.1:%d", r.pg.Port)
	if !r.scheduled(FaultFailover) {
		return dsn, nil
	}
	if r.standby, err = r.pg.NewReplica(ctx); err != nil {
		return "", fmt.Errorf("postgres replica: %w", err)
	}
	r.logf("postgres streaming replica on 127.0.0.1:%d (for %s)", r.standby.Port, FaultFailover)
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/soak?sslmode=disable&target_session_attrs=read-write",
		pgtest.Account, r.pg.Port, r.standby.Port), nil
}

// primary is the current primary (failover changes it while the sampler reads it).
func (r *run) primary() *pgtest.Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pg
}

// failover is FaultFailover: the primary is stopped (a fast shutdown sends the replica
// everything committed), the replica promoted, and the old primary rejoined as the new
// primary's replica from a fresh base backup, so that the next failover can go back.
func (r *run) failover(ctx context.Context) error {
	old, next := r.pg, r.standby
	old.Halt()
	if err := next.Promote(ctx); err != nil {
		return fmt.Errorf("promote 127.0.0.1:%d: %w", next.Port, err)
	}
	r.mu.Lock()
	r.pg, r.standby = next, old
	r.mu.Unlock()
	r.note = fmt.Sprintf("primary now 127.0.0.1:%d; 127.0.0.1:%d rejoined as its replica", next.Port, old.Port)
	r.logf("postgres: 127.0.0.1:%d promoted; rejoining 127.0.0.1:%d as its replica", next.Port, old.Port)
	if err := old.Reseed(ctx, next); err != nil {
		return fmt.Errorf("rejoin 127.0.0.1:%d as a replica: %w", old.Port, err)
	}
	return nil
}
