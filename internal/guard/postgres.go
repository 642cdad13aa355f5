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

// ErrSessionEnded is the cause of a Postgres lock's lost context: the session holding the lock
// ended, or stopped answering, so PostgreSQL no longer holds the lock for it.
var ErrSessionEnded = errors.New("guard: the database session holding the lock ended")

// Postgres is a Remote on PostgreSQL session-level advisory locks. Each lock held pins one
// connection of its own pool (Config.RemoteConns), never one of the store's, and a watcher
// goroutine that notices the session ending (see Lock).
type Postgres struct {
	pool *pgxpool.Pool
	ping time.Duration

	mu   sync.Mutex
	held map[*pgxpool.Conn]*watcher // connections pinned by locks not given back yet
}

// watcher is the goroutine watching one held lock's connection; it owns the connection while it
// runs.
type watcher struct {
	stop context.CancelFunc // ends the watch
	done chan struct{}      // closed when the watch has ended and the connection is free again
	lose context.CancelCauseFunc
}

// halt ends the watch and waits for it.
func (w *watcher) halt() {
	w.stop()
	<-w.done
}

// OpenPostgres connects a pool of at most cfg.RemoteConns connections to the database at url;
// cfg.RemotePing paces the watch of held locks.
func OpenPostgres(ctx context.Context, url string, cfg Config) (*Postgres, error) {
	cfg = cfg.WithDefaults()
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	pcfg.MaxConns = int32(max(cfg.RemoteConns, 1))
	pcfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	return &Postgres{pool: pool, ping: cfg.RemotePing, held: map[*pgxpool.Conn]*watcher{}}, nil
}

// Close closes the pool. Locks still held (a holder that never gave its lock back) end with
// their sessions, which Close closes rather than waiting for them (the pool's own Close waits
// for every acquired connection); their holders are told they lost them.
func (p *Postgres) Close() {
	p.mu.Lock()
	held := p.held
	p.held = map[*pgxpool.Conn]*watcher{}
	p.mu.Unlock()
	for conn, w := range held {
		w.halt()
		w.lose(fmt.Errorf("%w: the guard's pool was closed", ErrSessionEnded))
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
//
// While the lock is held a goroutine of its own (ended by unlock, or by Close) watches its
// connection, so that lost is done as soon as the session is known to have ended: it waits on
// the connection (pgconn's WaitForNotification), which returns at once when the server ends the
// session (a terminated backend's FATAL error, a shutdown) or the connection breaks; and after
// every RemotePing of quiet it pings the session, taking a ping unanswered within RemotePing
// for the end of the session (a connection that died silently). A session judged lost is
// closed, so that a server that still holds the lock for it gives it up as soon as it hears.
// Watching rather than pinging alone makes a visible end a matter of one message, not of the
// ping's period; waiting on the connection costs no round trip.
func (p *Postgres) Lock(ctx context.Context, key string, exclusive bool) (context.Context, func(), error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("no connection free for the guard: %w", ErrBusy)
		}
		return nil, nil, err
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
			return nil, nil, ErrBusy
		}
		return nil, nil, err
	}
	lost, lose := context.WithCancelCause(context.Background())
	wctx, stop := context.WithCancel(context.Background())
	w := &watcher{stop: stop, done: make(chan struct{}), lose: lose}
	p.mu.Lock()
	p.held[conn] = w
	p.mu.Unlock()
	go func() {
		defer close(w.done)
		p.watch(wctx, conn.Conn().PgConn(), lose)
	}()
	return lost, func() {
		p.mu.Lock()
		_, mine := p.held[conn]
		delete(p.held, conn)
		p.mu.Unlock()
		if !mine { // Close took it
			return
		}
		w.halt() // the connection is the unlock's from here
		uctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
		defer cancel()
		if lost.Err() != nil {
			_ = conn.Conn().Close(uctx) // the watcher closed it already; make sure
		} else if _, err := conn.Exec(uctx, unlock, id); err != nil {
			_ = conn.Conn().Close(uctx) // ending the session releases its locks
		}
		conn.Release()
	}, nil
}

// watch watches a held lock's connection until ctx ends (the lock is being given back) or the
// session is found ended, which it reports through lose after closing the connection.
func (p *Postgres) watch(ctx context.Context, pc *pgconn.PgConn, lose context.CancelCauseFunc) {
	ended := func(err error) {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = pc.Close(cctx)
		cancel()
		lose(err)
	}
	for {
		qctx, cancel := context.WithTimeout(ctx, p.ping)
		err := pc.WaitForNotification(qctx) // returns only for a notification, an error or qctx
		quiet := qctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil: // a notification: nobody listens on this session, nothing to do
			continue
		case !quiet:
			ended(fmt.Errorf("%w: %w", ErrSessionEnded, err))
			return
		}
		pctx, cancel := context.WithTimeout(ctx, p.ping)
		err = pc.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return // unlock interrupted the ping: it finds out whether the session still works
		}
		if err != nil {
			ended(fmt.Errorf("%w: no answer to a ping within %v: %w", ErrSessionEnded, p.ping, err))
			return
		}
	}
}
