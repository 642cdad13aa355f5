package guard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockNotAvailable is PostgreSQL's SQLSTATE for a lock wait that lock_timeout ended.
const lockNotAvailable = "55P03"

// unlockTimeout bounds giving a lock back; past it the session is closed, which releases it too.
const unlockTimeout = 5 * time.Second

// Postgres is a Remote on PostgreSQL session-level advisory locks. Each lock held pins one
// connection of its own pool (Config.RemoteConns), never one of the store's.
type Postgres struct {
	pool *pgxpool.Pool

	mu   sync.Mutex
	held map[*pgxpool.Conn]struct{} // connections pinned by locks not given back yet
}

// OpenPostgres connects a pool of at most conns connections to the database at url.
func OpenPostgres(ctx context.Context, url string, conns int) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	cfg.MaxConns = int32(max(conns, 1))
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	return &Postgres{pool: pool, held: map[*pgxpool.Conn]struct{}{}}, nil
}

// Close closes the pool. Locks still held (a holder that never gave its lock back) end with
// their sessions, which Close closes rather than waiting for them: the pool's own Close waits
// for every acquired connection.
func (p *Postgres) Close() {
	p.mu.Lock()
	held := p.held
	p.held = map[*pgxpool.Conn]struct{}{}
	p.mu.Unlock()
	for conn := range held {
		ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
		_ = conn.Conn().Close(ctx)
		cancel()
		conn.Release()
	}
	p.pool.Close()
}

// keyID maps a key to an advisory lock id. Two keys that collide are merely ordered together.
func keyID(key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("sshapi/guard/"))
	_, _ = h.Write([]byte(key))
	return int64(h.Sum64())
}

// Lock implements Remote. The wait is bounded by ctx's deadline through lock_timeout, so a wait
// that runs out leaves the connection usable.
func (p *Postgres) Lock(ctx context.Context, key string, exclusive bool) (func(), error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no connection free for the guard: %w", ErrBusy)
		}
		return nil, err
	}
	wait := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl), time.Millisecond)
	}
	fn := "pg_advisory_lock_shared"
	unlock := "SELECT pg_advisory_unlock_shared($1)"
	if exclusive {
		fn, unlock = "pg_advisory_lock", "SELECT pg_advisory_unlock($1)"
	}
	id := keyID(key)
	// One round trip: the session's lock_timeout ends the wait (the pool is the guard's own, so
	// the setting concerns nobody else); the context only guards a server that does not answer.
	// Both values are integers formatted here.
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+unlockTimeout)
	defer cancel()
	_, err = conn.Exec(qctx, fmt.Sprintf("SET lock_timeout = %d; SELECT %s(%d)", wait.Milliseconds()+1, fn, id))
	if err != nil {
		conn.Release()
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == lockNotAvailable {
			return nil, ErrBusy
		}
		return nil, err
	}
	p.mu.Lock()
	p.held[conn] = struct{}{}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		_, mine := p.held[conn]
		delete(p.held, conn)
		p.mu.Unlock()
		if !mine { // Close took it
			return
		}
		uctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, unlock, id); err != nil {
			_ = conn.Conn().Close(uctx) // ending the session releases its locks
		}
		conn.Release()
	}, nil
}
