package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// NewReplica seeds a streaming replica of c (pg_basebackup -R: WAL streamed during the copy,
// standby.signal and primary_conninfo written) into a new directory and starts it, read-only,
// on a free port with c's Options. Stop it like any cluster.
//
// Replication is asynchronous: a commit acknowledged by the primary reaches the replica a moment
// later. A primary halted with Halt (a fast shutdown) sends everything to its connected
// standbys before it exits, so promoting the replica after that loses nothing.
func (c *Cluster) NewReplica(ctx context.Context) (*Cluster, error) {
	r, err := newCluster(c.opts)
	if err != nil {
		return nil, err
	}
	if err := r.seedFrom(ctx, c); err != nil {
		r.remove()
		return nil, err
	}
	if err := r.startOnFreePort(ctx); err != nil {
		r.remove()
		return nil, fmt.Errorf("replica: %w", err)
	}
	return r, nil
}

// seedFrom copies primary's data into c's (empty) data directory with pg_basebackup.
func (c *Cluster) seedFrom(ctx context.Context, primary *Cluster) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port),
		"-U", Account, "-D", c.dataDir(), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	cmd.SysProcAttr = c.cred
	cmd.Dir = c.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup from port %d: %w: %s", primary.Port, err, out)
	}
	return nil
}

// Promote ends a replica's recovery (pg_ctl promote) and waits until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "pg_ctl"), "promote", "-w", "-t", "60", "-D", c.dataDir())
	cmd.SysProcAttr = c.cred
	cmd.Dir = c.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl promote: %w: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec, err := c.InRecovery(ctx)
		if err == nil && !rec {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("promoted replica still in recovery after 30 s (%v): %s", err, tail(c.LogPath(), 2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the promotion: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// InRecovery reports whether the server is a standby (pg_is_in_recovery()).
func (c *Cluster) InRecovery(ctx context.Context) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, c.URL("postgres"))
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var rec bool
	if err := conn.QueryRow(cctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
		return false, fmt.Errorf("pg_is_in_recovery: %w", err)
	}
	return rec, nil
}

// Reseed turns c, a former primary, into a streaming replica of primary: it halts c, replaces
// its data with a fresh base backup of primary and starts it again on the same port. This is
// how an operator rejoins the old primary after a failover (pg_rewind would copy less).
func (c *Cluster) Reseed(ctx context.Context, primary *Cluster) error {
	c.Halt()
	if err := os.RemoveAll(c.dataDir()); err != nil {
		return fmt.Errorf("remove old data: %w", err)
	}
	if err := c.seedFrom(ctx, primary); err != nil {
		return err
	}
	return c.Resume(ctx)
}

// WaitReplayed waits until replica has replayed everything primary had written when it was
// called (its current WAL position), or ctx ends.
func WaitReplayed(ctx context.Context, primary, replica *Cluster) error {
	conn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the primary: %w", err)
	}
	var lsn string
	err = conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("pg_current_wal_lsn: %w", err)
	}
	rconn, err := pgx.Connect(ctx, replica.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the replica: %w", err)
	}
	defer rconn.Close(ctx)
	for {
		var done bool
		if err := rconn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&done); err != nil {
			return fmt.Errorf("pg_last_wal_replay_lsn: %w", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the replica to replay %s: %w", lsn, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
