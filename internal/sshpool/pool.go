// Package sshpool keeps authenticated SSH connections to HPC systems and lends their channels to
// requests, so that hundreds of requests per second flow through a stock OpenSSH server
// (MaxStartups 10:30:100, MaxSessions 10) without a refused connection or channel ever reaching
// the caller.
//
// Connections are keyed by (system, remote user, credential). Each connection offers a fixed
// number of channel slots (the server's MaxSessions minus two, because OpenSSH closes channels
// asynchronously). Requests that find every slot busy wait in a FIFO queue until their deadline;
// a new connection is dialed only while waiters exist, up to a per-key and a per-host cap, with
// at most a few unauthenticated dials in flight per host. Refused dials and refused channel opens
// are retried with jittered backoff inside the caller's deadline. An authentication failure stops
// all dialing for that key (the key changes when the credential does).
//
// Many owners share one host: each owner gets at most a share of the host's connections and of its
// unauthenticated dials (MaxConnsPerOwnerHost, MaxDialsPerOwnerHost), and an owner's dials wait
// for one of the owner's dial slots before they queue for the host's, so an owner whose dials keep
// failing (a junk key, a stalling server) holds at most its share of the host's dial slots.
//
// Short read-only commands (ShellRun) may run on a connection's shared shell instead of a
// session of their own (shell.go): a long-lived sh that forks and execs each command alone. A
// shell belongs to one connection and so to one key: it only ever runs commands of the owner
// and credential its connection was made for, by construction, whatever other principals do at
// the same time; it holds one of that connection's slots, so the owner's shares above bound
// shells too, and at most shell_depth commands queue on it.
package sshpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sshapi/sshapi/internal/netpolicy"
)

// Key identifies a family of interchangeable connections: same system, remote user and
// credential version.
type Key struct {
	// System identifies the registered system, e.g. "owner/id".
	System string
	// User is the remote account.
	User string
	// Credential identifies the credential and its version; a new value means new connections.
	Credential string
	// Owner is the user the connections are made for. Owners share a host's connection and dial
	// limits in shares (Config.MaxConnsPerOwnerHost, MaxDialsPerOwnerHost); empty means System.
	Owner string
}

// owner is the name the key's connections and dials are counted under on their host.
func (k Key) owner() string {
	if k.Owner != "" {
		return k.Owner
	}
	return k.System
}

func (k Key) String() string { return k.User + "@" + k.System }

// Target tells the pool how to reach a Key.
type Target struct {
	Key Key
	// Addr is host:port of the SSH server.
	Addr string
	// Config authenticates and verifies the host key. Its Timeout is ignored; the pool's
	// DialTimeout applies.
	Config *ssh.ClientConfig
	// MaxSessions is the server's MaxSessions (OpenSSH default 10). Each connection lends
	// MaxSessions-2 channels at once.
	MaxSessions int
	// Jump, if set, is the host connections go through (OpenSSH's ProxyJump): the pool lends a
	// slot on one of Jump's own pooled connections, opens a direct-tcpip channel to Addr (as the
	// jump host resolves it) and runs this target's handshake inside it. The slot stays taken
	// for the life of the tunneled connection.
	Jump *Target
}

// hostID names the network path to t for the per-host limits: its address, or for a tunneled
// target the jump's path followed by the address the jump host dials.
func (t Target) hostID() string {
	if t.Jump != nil {
		return t.Jump.hostID() + ">" + t.Addr
	}
	return t.Addr
}

// JumpError reports that the jump host, not the target, failed: its host key, its credential,
// or reaching the target from it. It wraps the cause, so errors.Is(err, ErrAuth) and
// errors.Is(err, ErrHostKey) hold for the jump's own failures.
type JumpError struct {
	// Jump is the jump host's key.
	Jump Key
	// Addr is the jump host's address.
	Addr string
	Err  error
}

func (e *JumpError) Error() string {
	return fmt.Sprintf("jump host %s (%s): %v", e.Jump, e.Addr, e.Err)
}

func (e *JumpError) Unwrap() error { return e.Err }

// Option configures a Pool.
type Option func(*Pool)

// WithNetworkPolicy makes every direct dial obey np (nil allows everything). Tunneled hops are
// dialed by the jump host and are not subject to it.
func WithNetworkPolicy(np *netpolicy.Policy) Option {
	return func(p *Pool) { p.policy = np }
}

// Config holds the pool's limits. Zero fields take the defaults shown.
type Config struct {
	MaxConnsPerKey    int           `yaml:"max_conns_per_key" env:"MAX_CONNS_PER_KEY"`   // 6
	MaxConnsPerHost   int           `yaml:"max_conns_per_host" env:"MAX_CONNS_PER_HOST"` // 64
	MaxDialsPerHost   int           `yaml:"max_dials_per_host" env:"MAX_DIALS_PER_HOST"` // 3 unauthenticated in flight (sshd starts dropping at 10)
	DialTimeout       time.Duration `yaml:"dial_timeout" env:"DIAL_TIMEOUT"`             // 15s for TCP + handshake + auth
	AcquireTimeout    time.Duration `yaml:"acquire_timeout" env:"ACQUIRE_TIMEOUT"`       // 30s wait for a channel when the caller has no deadline
	KeepaliveInterval time.Duration `yaml:"keepalive_interval" env:"KEEPALIVE_INTERVAL"` // 15s
	KeepaliveTimeout  time.Duration `yaml:"keepalive_timeout" env:"KEEPALIVE_TIMEOUT"`   // 10s
	IdleTimeout       time.Duration `yaml:"idle_timeout" env:"IDLE_TIMEOUT"`             // 5m
	// SFTPMaxPacket is the data one SFTP read or write request carries; 0 (the default) chooses
	// per server: 261,120 bytes where the sftp-server is OpenSSH's with limits@openssh.com
	// (what OpenSSH's own sftp client uses there), 32 KiB elsewhere (see newSFTP).
	// SFTPMaxInflight is how many requests one file keeps in flight; 0 (the default) makes
	// them 2 MiB in all, one SSH channel window (64 at 32 KiB, 8 at 255 KiB).
	SFTPMaxPacket   int `yaml:"sftp_max_packet" env:"SFTP_MAX_PACKET"`
	SFTPMaxInflight int `yaml:"sftp_max_inflight" env:"SFTP_MAX_INFLIGHT"`
	// SFTPIdlePerConn is how many dedicated SFTP channels (downloads, uploads, transfer
	// streams) a connection keeps open after their lease ends, for the next one (default 2;
	// -1 keeps none); SFTPIdleTimeout how long one stays idle before it is closed (20s).
	SFTPIdlePerConn int           `yaml:"sftp_idle_per_conn" env:"SFTP_IDLE_PER_CONN"`
	SFTPIdleTimeout time.Duration `yaml:"sftp_idle_timeout" env:"SFTP_IDLE_TIMEOUT"`
	// ShellDepth is how many short read-only commands (checksums of small files) may queue on
	// a connection's shared shell (default 16; -1: no shared shells, every command gets a
	// session of its own). See shell.go. A shell idle for SFTPIdleTimeout exits.
	ShellDepth        int           `yaml:"shell_depth" env:"SHELL_DEPTH"`
	MaxOpenRetryDelay time.Duration `yaml:"max_open_retry_delay" env:"MAX_OPEN_RETRY_DELAY"` // 200ms
	// OpenTimeout bounds one channel open (and an SFTP channel's version exchange) on an
	// established connection (20s): a live server answers or refuses at once, so a connection
	// that does not is treated as dead, closed, and the open retried on another.
	OpenTimeout time.Duration `yaml:"open_timeout" env:"OPEN_TIMEOUT"`
	// MaxConnsPerOwnerHost is one owner's share of a host's connections (half of
	// MaxConnsPerHost); MaxDialsPerOwnerHost its share of the host's unauthenticated dials
	// (half of MaxDialsPerHost, rounded up: 2 of 3).
	MaxConnsPerOwnerHost int `yaml:"max_conns_per_owner_host" env:"MAX_CONNS_PER_OWNER_HOST"`
	MaxDialsPerOwnerHost int `yaml:"max_dials_per_owner_host" env:"MAX_DIALS_PER_OWNER_HOST"`
	// AuthFailBackoffMax caps the pause an owner's next dial to a host waits after that owner's
	// dials there failed authentication: 250ms after the first failure, doubling per further
	// failure up to this (10s); a successful login resets it.
	AuthFailBackoffMax time.Duration `yaml:"auth_fail_backoff_max" env:"AUTH_FAIL_BACKOFF_MAX"`
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxConnsPerKey, 6)
	def(&c.MaxConnsPerHost, 64)
	def(&c.MaxDialsPerHost, 3)
	switch {
	case c.SFTPIdlePerConn == 0:
		c.SFTPIdlePerConn = 2
	case c.SFTPIdlePerConn < 0:
		c.SFTPIdlePerConn = 0
	}
	defd(&c.SFTPIdleTimeout, 20*time.Second)
	switch {
	case c.ShellDepth == 0:
		c.ShellDepth = 16
	case c.ShellDepth < 0:
		c.ShellDepth = 0
	}
	defd(&c.DialTimeout, 15*time.Second)
	defd(&c.AcquireTimeout, 30*time.Second)
	defd(&c.KeepaliveInterval, 15*time.Second)
	defd(&c.KeepaliveTimeout, 10*time.Second)
	defd(&c.IdleTimeout, 5*time.Minute)
	defd(&c.MaxOpenRetryDelay, 200*time.Millisecond)
	defd(&c.OpenTimeout, 20*time.Second)
	def(&c.MaxConnsPerOwnerHost, max(c.MaxConnsPerHost/2, 1))
	def(&c.MaxDialsPerOwnerHost, (c.MaxDialsPerHost+1)/2)
	c.MaxConnsPerOwnerHost = min(c.MaxConnsPerOwnerHost, c.MaxConnsPerHost)
	c.MaxDialsPerOwnerHost = min(c.MaxDialsPerOwnerHost, c.MaxDialsPerHost)
	defd(&c.AuthFailBackoffMax, 10*time.Second)
}

// Errors callers can test for with errors.Is.
var (
	// ErrAuth means the server rejected the credential; the pool will not dial this key again.
	ErrAuth = errors.New("ssh authentication failed")
	// ErrHostKey means the server's host key did not match the registered one.
	ErrHostKey = errors.New("ssh host key verification failed")
	// ErrUnavailable means no channel could be had before the deadline (server down, refusing,
	// or saturated). The wrapped text says which.
	ErrUnavailable = errors.New("ssh server unavailable")
	// ErrClosed means the pool is shutting down.
	ErrClosed = errors.New("ssh pool closed")
	// ErrConnLost means the connection carrying an operation died while it ran.
	ErrConnLost = errors.New("ssh connection lost")
	// ErrNotStarted marks a failure that happened before a session's command or subsystem could
	// reach the server (no channel could be had, or the connection died before the request left
	// this process): nothing ran, so starting it again on another connection cannot run it twice.
	ErrNotStarted = errors.New("command not started")
	// ErrNegotiation means client and server share no cipher, key exchange or host key
	// algorithm (e.g. a system's ciphers list the server does not offer). Retrying cannot help.
	ErrNegotiation = errors.New("ssh algorithm negotiation failed")
	// ErrNoSFTP means the server refused the SFTP subsystem (sshd has no "Subsystem sftp" line,
	// or a Match block turns it off for this account). The connection is fine and commands
	// still run; retrying cannot help.
	ErrNoSFTP = errors.New("the system refused the SFTP subsystem")
)

// Pool lends channels on pooled SSH connections. Create it with New, call Start, and Stop it to
// drain in-flight work and close every connection.
type Pool struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	policy  *netpolicy.Policy

	mu      sync.Mutex
	keys    map[Key]*keyPool
	hosts   map[string]*hostState
	closing bool
	drained chan struct{} // closed when closing and nothing is in use

	ctx    context.Context // canceled by Stop; parents dial loops and keepalives
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type keyPool struct {
	key     Key
	target  Target
	conns   []*conn
	waiters []*waiter
	dialing int
	// sftpPending is non-nil while one caller opens a shared SFTP channel for this key.
	sftpPending chan struct{}
	// shellOpening is set while one caller opens a shared shell for this key (shell.go);
	// before shellRetryAt none is opened (the last one did not start).
	shellOpening bool
	shellRetryAt time.Time
	authErr      error // circuit breaker: set after an authentication failure
	lastErr      error // last dial error, reported to waiters who time out
}

type hostState struct {
	addr    string
	dialSem chan struct{}
	conns   int
	dialing int
	owners  map[string]*ownerShare // each owner's part of conns and dialing, and its dial slots
	checks  int                    // Checks holding this state outside the pool's lock
}

// unusedLocked says nothing refers to h: no connection, dial, Check or owner's share (which
// outlives its last dial while a failed-login backoff lasts). Such a state is dropped from
// p.hosts by evictIdle, so the addresses users once named do not pile up.
func (h *hostState) unusedLocked() bool {
	return h.conns == 0 && h.dialing == 0 && h.checks == 0 && len(h.owners) == 0 && len(h.dialSem) == 0
}

// ownerShare is one owner's use of a host.
type ownerShare struct {
	conns   int
	dialing int
	dialSem chan struct{} // the owner's dial slots on the host, taken before the host's
	refs    int           // holders of and waiters for dialSem
	// authFails counts the owner's consecutive failed logins on the host; its next dial waits
	// until authUntil.
	authFails int
	authUntil time.Time
}

// authFailBackoffBase is the pause after an owner's first failed login on a host.
const authFailBackoffBase = 250 * time.Millisecond

// noteAuthLocked records the outcome of one of owner's dials to h for the failed-login backoff.
func (p *Pool) noteAuthLocked(h *hostState, owner string, err error) {
	sh := p.shareLocked(h, owner)
	var je *JumpError // a jump host's refusal is not a login failure on h
	switch {
	case err == nil:
		sh.authFails, sh.authUntil = 0, time.Time{}
	case errors.Is(err, ErrAuth) && !errors.As(err, &je):
		sh.authFails++
		d := min(authFailBackoffBase<<min(sh.authFails-1, 16), p.cfg.AuthFailBackoffMax)
		sh.authUntil = time.Now().Add(d)
	}
}

// shareLocked returns owner's share of h, creating it.
func (p *Pool) shareLocked(h *hostState, owner string) *ownerShare {
	sh := h.owners[owner]
	if sh == nil {
		if h.owners == nil {
			h.owners = make(map[string]*ownerShare)
		}
		sh = &ownerShare{dialSem: make(chan struct{}, p.cfg.MaxDialsPerOwnerHost)}
		h.owners[owner] = sh
	}
	return sh
}

// tidyShareLocked drops owner's share of h once nothing counts against it.
func (h *hostState) tidyShareLocked(owner string) {
	if sh := h.owners[owner]; sh != nil && sh.conns <= 0 && sh.dialing <= 0 && sh.refs == 0 && time.Now().After(sh.authUntil) {
		delete(h.owners, owner)
	}
}

// ownerDialSlot takes one of owner's dial slots on h, waiting at most until ctx ends. The caller
// then queues for one of the host's slots (FIFO), so an owner never has more than its share of
// dials in flight or in the host's queue ahead of other owners.
func (p *Pool) ownerDialSlot(ctx context.Context, h *hostState, owner string) (release func(), err error) {
	p.mu.Lock()
	sh := p.shareLocked(h, owner)
	sh.refs++
	p.mu.Unlock()
	unref := func() {
		p.mu.Lock()
		sh.refs--
		h.tidyShareLocked(owner)
		p.mu.Unlock()
	}
	select {
	case sh.dialSem <- struct{}{}:
	case <-ctx.Done():
		unref()
		return nil, ctx.Err()
	}
	release = func() { <-sh.dialSem; unref() }
	// After failed logins the owner's next dial waits (holding only the owner's own slot).
	p.mu.Lock()
	wait := time.Until(sh.authUntil)
	p.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			release()
			return nil, ctx.Err()
		}
	}
	return release, nil
}

// dialEndedLocked uncounts a dial of kp's that ended (with or without a connection).
func (p *Pool) dialEndedLocked(kp *keyPool, h *hostState) {
	if sh := h.owners[kp.key.owner()]; sh != nil {
		sh.dialing--
		h.tidyShareLocked(kp.key.owner())
	}
}

type conn struct {
	kp       *keyPool
	host     *hostState
	client   *ssh.Client
	via      *conn       // the jump connection carrying this one, whose tunnel slot it holds
	slots    int         // channels this connection may have open at once
	inUse    int         // lent exec/dedicated channels
	bulk     int         // of inUse, dedicated SFTP channels (file data): what placement spreads
	idle     []*dataChan // dedicated SFTP channels kept open for the next lease, oldest first
	tunnels  int         // direct-tcpip channels carrying other pooled connections
	sftp     *sftp.Client
	sftpCh   *dataChan  // sftp's channel (nil with it)
	sftpUse  int        // borrowers of the shared SFTP client
	shell    *shellChan // the shared shell for short commands (shell.go), or nil
	lastUsed time.Time
	dead     bool
	// refusedUntil: the server refused a channel open here (MaxSessions, while channels we
	// closed are still closing on its side), so no channel is placed here until then or until
	// one of its channels ends, whichever is first (see openChannel). refusedTimer serves the
	// key's waiters when refusedUntil passes: nothing else may happen on the connection to
	// wake them then.
	refusedUntil time.Time
	refusedTimer *time.Timer
}

type waiter struct {
	ch    chan grant
	place placement
}

type grant struct {
	c   *conn
	err error
}

// New returns a pool with cfg's limits (defaults for zero fields).
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer, opts ...Option) *Pool {
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{
		cfg:   cfg,
		log:   log,
		keys:  make(map[Key]*keyPool),
		hosts: make(map[string]*hostState),
	}
	for _, o := range opts {
		o(p)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.metrics = newMetrics(p, reg)
	return p
}

// Start launches the janitor that evicts idle connections.
func (p *Pool) Start(ctx context.Context) error {
	p.wg.Add(1)
	go p.janitor()
	return nil
}

// Stop refuses new work, waits until lent channels come back (or ctx ends), then closes every
// connection and waits for the pool's goroutines.
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.closing {
		p.closing = true
		p.drained = make(chan struct{})
		for _, kp := range p.keys {
			p.failWaitersLocked(kp, ErrClosed)
		}
		p.checkDrainedLocked()
	}
	drained := p.drained
	p.mu.Unlock()
	var err error
	select {
	case <-drained:
	case <-ctx.Done():
		err = fmt.Errorf("ssh pool: in-flight work still running at shutdown: %w", ctx.Err())
	}
	p.cancel()
	p.mu.Lock()
	for _, kp := range p.keys {
		for _, c := range append([]*conn(nil), kp.conns...) {
			p.killLocked(c)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// Forget closes every connection whose key belongs to system (as given in Key.System) and drops
// its state, e.g. after the system or its credential changed. Work in flight fails.
func (p *Pool) Forget(system string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, kp := range p.keys {
		if k.System != system {
			continue
		}
		for _, c := range append([]*conn(nil), kp.conns...) {
			p.killLocked(c)
		}
		p.failWaitersLocked(kp, fmt.Errorf("%w: system %s changed", ErrUnavailable, system))
		delete(p.keys, k) // a dial still in flight notices and discards its connection
	}
}

// Connected reports whether the pool holds, or is dialing, a connection for k: whether a first
// channel to k waits for no dial of its own. Callers use it to start the further connections a
// large transfer will want alongside a first dial rather than after it.
func (p *Pool) Connected(k Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	kp := p.keys[k]
	return kp != nil && (len(kp.conns) > 0 || kp.dialing > 0)
}

// RTT returns the shortest round trip measured on any of k's pooled connections (each measures
// one beside its first SFTP channel's start), and false while none has. Callers use it to decide
// before probing the path themselves whether a large transfer will be striped.
func (p *Pool) RTT(k Key) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best int64
	if kp := p.keys[k]; kp != nil {
		for _, c := range kp.conns {
			if c.dead || c.client == nil {
				continue
			}
			if w := wireOf(c.client); w != nil {
				if d := w.rtt.Load(); d > 0 && (best == 0 || d < best) {
					best = d
				}
			}
		}
	}
	return time.Duration(best), best > 0
}

func (p *Pool) keyPoolLocked(t Target) *keyPool {
	kp := p.keys[t.Key]
	if kp == nil {
		kp = &keyPool{key: t.Key}
		p.keys[t.Key] = kp
	}
	kp.target = t
	return kp
}

func (p *Pool) hostLocked(addr string) *hostState {
	h := p.hosts[addr]
	if h == nil {
		h = &hostState{addr: addr, dialSem: make(chan struct{}, p.cfg.MaxDialsPerHost)}
		p.hosts[addr] = h
	}
	return h
}

func slotsFor(maxSessions int) int {
	if maxSessions <= 0 {
		maxSessions = 10
	}
	if maxSessions <= 2 {
		return 1
	}
	return maxSessions - 2
}

// acquire lends one channel slot on a connection for t, chosen by place, waiting and dialing as
// needed.
func (p *Pool) acquire(ctx context.Context, t Target, place placement) (*conn, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.AcquireTimeout)
		defer cancel()
	}
	start := time.Now()
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	kp := p.keyPoolLocked(t)
	if kp.authErr != nil {
		p.mu.Unlock()
		return nil, kp.authErr
	}
	if len(kp.waiters) == 0 {
		if c := p.connForLocked(kp, place); c != nil {
			c.lendLocked(place)
			p.mu.Unlock()
			p.metrics.acquireWait.Observe(0)
			return c, nil
		}
	}
	w := &waiter{ch: make(chan grant, 1), place: place}
	kp.waiters = append(kp.waiters, w)
	p.serveWaitersLocked(kp)
	p.mu.Unlock()

	select {
	case g := <-w.ch:
		p.metrics.acquireWait.Observe(time.Since(start).Seconds())
		return g.c, g.err
	case <-ctx.Done():
		p.mu.Lock()
		removed := kp.removeWaiter(w)
		last := kp.lastErr
		p.mu.Unlock()
		if !removed { // a grant raced with the deadline: hand the slot back
			if g := <-w.ch; g.c != nil {
				p.release(g.c, place)
			}
		}
		p.metrics.acquireTimeouts.Inc()
		if last != nil {
			return nil, fmt.Errorf("%w: no channel to %s within the deadline (last dial error: %v): %w", ErrUnavailable, t.Key, last, ctx.Err())
		}
		return nil, fmt.Errorf("%w: every channel to %s stayed busy until the deadline: %w", ErrUnavailable, t.Key, ctx.Err())
	}
}

func (kp *keyPool) removeWaiter(w *waiter) bool {
	for i, x := range kp.waiters {
		if x == w {
			kp.waiters = append(kp.waiters[:i], kp.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// serveWaitersLocked hands free slots to waiters in FIFO order (each placed by its placement)
// and starts dials if waiters remain that the connections being dialed will not absorb.
func (p *Pool) serveWaitersLocked(kp *keyPool) {
	kept := kp.waiters[:0]
	for _, w := range kp.waiters {
		c := p.connForLocked(kp, w.place)
		if c == nil {
			kept = append(kept, w)
			continue
		}
		c.lendLocked(w.place)
		w.ch <- grant{c: c}
	}
	clear(kp.waiters[len(kept):])
	kp.waiters = kept
	if len(kp.waiters) == 0 || kp.authErr != nil || p.closing {
		return
	}
	h := p.hostLocked(kp.target.hostID())
	sh := p.shareLocked(h, kp.key.owner())
	defer h.tidyShareLocked(kp.key.owner())
	for kp.dialing < dialsWanted(kp.waiters, slotsFor(kp.target.MaxSessions)) && p.mayDialLocked(kp, h, sh) {
		kp.dialing++
		h.dialing++
		sh.dialing++
		p.wg.Add(1)
		go p.dialLoop(kp, h)
	}
}

// mayDialLocked says whether one more connection for kp stays within the key's, the host's and
// the owner's share of the host's connections.
func (p *Pool) mayDialLocked(kp *keyPool, h *hostState, sh *ownerShare) bool {
	return len(kp.conns)+kp.dialing < p.cfg.MaxConnsPerKey &&
		h.conns+h.dialing < p.cfg.MaxConnsPerHost &&
		sh.conns+sh.dialing < p.cfg.MaxConnsPerOwnerHost
}

func (p *Pool) failWaitersLocked(kp *keyPool, err error) {
	for _, w := range kp.waiters {
		w.ch <- grant{err: err}
	}
	kp.waiters = nil
}

// release returns a slot lent by acquire for a channel placed by pl.
func (p *Pool) release(c *conn, pl placement) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.inUse--
	if pl.bulk() {
		c.bulk--
	}
	c.lastUsed = time.Now()
	c.refusedUntil = time.Time{} // a channel ended: the server frees its session before our next open
	if !c.dead {
		p.serveWaitersLocked(c.kp)
	}
	p.checkDrainedLocked()
}

// releaseRefused returns the slot of an open the server refused on c and places nothing more on
// c for d or until one of its channels ends: other channels go to connections with room (or
// wait for one) instead of being refused by the same lagging server process in turn.
func (p *Pool) releaseRefused(c *conn, pl placement, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.inUse--
	if pl.bulk() {
		c.bulk--
	}
	c.refusedUntil = time.Now().Add(d)
	if !c.dead {
		p.serveWaitersLocked(c.kp)
		if c.refusedTimer != nil {
			c.refusedTimer.Stop()
		}
		c.refusedTimer = time.AfterFunc(d, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if !c.dead && !p.closing {
				p.serveWaitersLocked(c.kp)
			}
		})
	}
	p.checkDrainedLocked()
}

// releaseTunnelLocked gives back the jump connection slot a tunneled connection held.
func (p *Pool) releaseTunnelLocked(c *conn) {
	c.tunnels--
	c.lastUsed = time.Now()
	if !c.dead {
		p.serveWaitersLocked(c.kp)
	}
}

func (p *Pool) checkDrainedLocked() {
	if !p.closing || p.drained == nil {
		return
	}
	for _, kp := range p.keys {
		for _, c := range kp.conns {
			if c.inUse > 0 || c.sftpUse > 0 || (c.shell != nil && c.shell.queued > 0) {
				return
			}
		}
	}
	select {
	case <-p.drained:
	default:
		close(p.drained)
	}
}

// dialLoop dials one connection for kp, retrying transient refusals with jittered backoff for as
// long as waiters remain.
func (p *Pool) dialLoop(kp *keyPool, h *hostState) {
	defer p.wg.Done()
	backoff := 50 * time.Millisecond
	for {
		// The owner's dial slot first: failing dials of one owner wait here, not in the host's
		// queue. Waiters may give up meanwhile; then the dial is not needed.
		release, gerr := p.ownerDialSlot(p.ctx, h, kp.key.owner())
		p.mu.Lock()
		if gerr != nil || kp.authErr != nil || len(kp.waiters) == 0 || p.closing {
			kp.dialing--
			h.dialing--
			p.dialEndedLocked(kp, h)
			p.mu.Unlock()
			if gerr == nil {
				release()
			}
			return
		}
		t := kp.target
		p.mu.Unlock()
		client, via, err := p.dialOnce(t, h)
		release()
		p.mu.Lock()
		p.noteAuthLocked(h, kp.key.owner(), err)
		if err == nil {
			kp.dialing--
			h.dialing--
			p.dialEndedLocked(kp, h)
			if p.closing || p.keys[kp.key] != kp { // shutting down, or Forget dropped the key
				if via != nil {
					p.releaseTunnelLocked(via)
				}
				p.mu.Unlock()
				client.Close()
				return
			}
			p.addConnLocked(kp, h, client, via)
			p.serveWaitersLocked(kp)
			p.mu.Unlock()
			return
		}
		kp.lastErr = err
		kp.unspreadLocked()
		p.serveWaitersLocked(kp)
		var je *JumpError
		switch {
		case errors.As(err, &je) && IsPermanentDialErr(err):
			// The jump host failed for good: fail the waiters, but a fixed jump credential
			// must not find this target's key blocked.
			p.failWaitersLocked(kp, err)
		case errors.Is(err, ErrAuth):
			kp.authErr = err
			p.failWaitersLocked(kp, err)
		case IsPermanentDialErr(err):
			p.failWaitersLocked(kp, err)
		}
		if len(kp.waiters) == 0 || p.closing {
			kp.dialing--
			h.dialing--
			p.dialEndedLocked(kp, h)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.log.Debug("ssh dial retry", "key", kp.key.String(), "addr", h.addr, "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff/2 + rand.N(backoff)):
		case <-p.ctx.Done():
			p.mu.Lock()
			kp.dialing--
			h.dialing--
			p.dialEndedLocked(kp, h)
			p.mu.Unlock()
			return
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (p *Pool) addConnLocked(kp *keyPool, h *hostState, client *ssh.Client, via *conn) *conn {
	c := &conn{kp: kp, host: h, client: client, via: via, slots: slotsFor(kp.target.MaxSessions), lastUsed: time.Now()}
	kp.conns = append(kp.conns, c)
	h.conns++
	p.shareLocked(h, kp.key.owner()).conns++
	p.wg.Add(2)
	go p.watch(c)
	go p.keepalive(c)
	p.log.Info("ssh connection opened", "key", kp.key.String(), "addr", h.addr)
	return c
}

// dialOnce opens and authenticates one connection, holding one of the host's dial tokens while
// the connection is unauthenticated. A tunneled connection also returns the jump connection
// whose slot it holds.
func (p *Pool) dialOnce(t Target, h *hostState) (*ssh.Client, *conn, error) {
	select {
	case h.dialSem <- struct{}{}:
	case <-p.ctx.Done():
		return nil, nil, ErrClosed
	}
	defer func() { <-h.dialSem }()
	client, via, err := p.dial(p.ctx, t, p.cfg.DialTimeout)
	p.metrics.dials.WithLabelValues(dialResult(err)).Inc()
	return client, via, err
}

// dial opens one authenticated connection to t within timeout: directly under the pool's network
// policy, or through a pooled connection to t.Jump.
func (p *Pool) dial(ctx context.Context, t Target, timeout time.Duration) (*ssh.Client, *conn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return tryHostKeyTypes(t, func(t Target) (*ssh.Client, *conn, error) { return p.dialVia(ctx, t) })
}

// dialVia is one connection attempt of dial.
func (p *Pool) dialVia(ctx context.Context, t Target) (*ssh.Client, *conn, error) {
	if t.Jump == nil {
		client, err := dialDirect(ctx, t, p.policy)
		return client, nil, err
	}
	jc, err := p.acquire(ctx, *t.Jump, placeControl)
	if err != nil {
		return nil, nil, &JumpError{Jump: t.Jump.Key, Addr: t.Jump.Addr, Err: err}
	}
	p.mu.Lock() // the slot now carries a tunnel, not a lent channel
	jc.inUse--
	jc.tunnels++
	p.checkDrainedLocked()
	p.mu.Unlock()
	nc, err := jc.client.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		var oce *ssh.OpenChannelError
		p.mu.Lock()
		if !errors.As(err, &oce) && ctx.Err() == nil {
			p.killLocked(jc) // the jump connection is gone; the next attempt dials a new one
		}
		p.releaseTunnelLocked(jc)
		p.mu.Unlock()
		return nil, nil, &JumpError{Jump: t.Jump.Key, Addr: t.Jump.Addr, Err: fmt.Errorf("direct-tcpip to %s: %w", t.Addr, err)}
	}
	// A channel has no deadlines: closing it is what ends a stalled handshake.
	client, err := handshake(ctx, nc, t, func() { _ = nc.Close() })
	if err != nil {
		p.mu.Lock()
		p.releaseTunnelLocked(jc)
		p.mu.Unlock()
		return nil, nil, err
	}
	return client, jc, nil
}

// Dial opens one authenticated SSH connection to t outside any pool, classifying failures as
// ErrAuth, ErrHostKey or a transient error. The whole exchange is bounded by timeout. Targets
// with a Jump need a Pool.
func Dial(ctx context.Context, t Target, timeout time.Duration) (*ssh.Client, error) {
	if t.Jump != nil {
		return nil, fmt.Errorf("dial %s: a target with a jump host is dialed through a Pool", t.Addr)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client, _, err := tryHostKeyTypes(t, func(t Target) (*ssh.Client, *conn, error) {
		c, err := dialDirect(ctx, t, nil)
		return c, nil, err
	})
	return client, err
}

// tryHostKeyTypes runs attempt and, when only fingerprints were registered and the server
// presented a key of another type, runs it again offering the server's other key types (nothing
// is sent before the host key is accepted, so a refused attempt discloses nothing).
func tryHostKeyTypes(t Target, attempt func(Target) (*ssh.Client, *conn, error)) (*ssh.Client, *conn, error) {
	cfg := *t.Config
	var tried []error
	for {
		t.Config = &cfg
		client, via, err := attempt(t)
		var hk *HostKeyError
		if err == nil || !errors.As(err, &hk) || !hk.TryOtherAlgorithms {
			if err != nil && len(tried) > 0 {
				err = fmt.Errorf("%w (also presented: %w)", err, errors.Join(tried...))
			}
			return client, via, err
		}
		tried = append(tried, hk)
		cfg.HostKeyAlgorithms = withoutKeyType(cfg.HostKeyAlgorithms, hk.KeyType)
		if len(cfg.HostKeyAlgorithms) == 0 {
			return nil, nil, err
		}
	}
}

// dialDirect connects to t.Addr under np (nil: no policy) and runs the handshake within ctx.
func dialDirect(ctx context.Context, t Target, np *netpolicy.Policy) (*ssh.Client, error) {
	nc, err := np.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", t.Addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	// Bound the handshake: a server that accepts and then stalls (MaxStartups) must not hang us.
	return handshake(ctx, nc, t, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
}

// handshake runs the SSH handshake and authentication on nc, calling abort if ctx ends first.
func handshake(ctx context.Context, nc net.Conn, t Target, abort func()) (*ssh.Client, error) {
	stop := context.AfterFunc(ctx, abort)
	cfg := *t.Config
	w := newWire(nc)
	sc, chans, reqs, err := ssh.NewClientConn(w, t.Addr, &cfg)
	if !stop() {
		err = errors.Join(err, ctx.Err())
	}
	if err != nil {
		nc.Close()
		return nil, classifyDialErr(t, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return ssh.NewClient(wiredConn{Conn: sc, w: w}, chans, reqs), nil
}

// IsPermanentDialErr reports whether retrying a dial cannot help (callers such as the transfer
// engine use it to fail fast instead of retrying until a deadline): the host key is wrong, the
// network policy forbids the address, or the jump host refuses to forward.
func IsPermanentDialErr(err error) bool {
	var oce *ssh.OpenChannelError
	return errors.Is(err, ErrAuth) || errors.Is(err, ErrHostKey) || errors.Is(err, netpolicy.ErrDenied) || errors.Is(err, ErrNegotiation) ||
		(errors.As(err, &oce) && oce.Reason == ssh.Prohibited)
}

func classifyDialErr(t Target, err error) error {
	var hk *HostKeyError
	switch {
	case errors.As(err, &hk):
		return fmt.Errorf("%w: %s: %w", ErrHostKey, t.Addr, err)
	case strings.Contains(err.Error(), "unable to authenticate"):
		return fmt.Errorf("%w for %s at %s: %w", ErrAuth, t.Config.User, t.Addr, err)
	case strings.Contains(err.Error(), "no common algorithm"):
		return fmt.Errorf("%w with %s: %w", ErrNegotiation, t.Addr, err)
	}
	return fmt.Errorf("ssh handshake with %s: %w", t.Addr, err)
}

func dialResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrAuth):
		return "auth_failed"
	case errors.Is(err, ErrHostKey):
		return "host_key_mismatch"
	case errors.Is(err, netpolicy.ErrDenied):
		return "denied"
	case isRefusal(err):
		return "refused"
	}
	return "failed"
}

// isRefusal reports whether err looks like sshd turning a connection away (MaxStartups,
// PerSourcePenalties, a restart in progress).
func isRefusal(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "Not allowed at this time")
}

// watch removes c from the pool when its connection ends.
func (p *Pool) watch(c *conn) {
	defer p.wg.Done()
	err := c.client.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !c.dead {
		p.log.Warn("ssh connection lost", "key", c.kp.key.String(), "err", err)
	}
	p.killLocked(c)
	p.serveWaitersLocked(c.kp)
}

// killLocked marks c dead, removes it from its key and closes it. Idempotent.
func (p *Pool) killLocked(c *conn) {
	if c.dead {
		return
	}
	c.dead = true
	if c.refusedTimer != nil {
		c.refusedTimer.Stop()
	}
	kp := c.kp
	for i, x := range kp.conns {
		if x == c {
			kp.conns = append(kp.conns[:i], kp.conns[i+1:]...)
			break
		}
	}
	c.host.conns--
	if sh := c.host.owners[kp.key.owner()]; sh != nil {
		sh.conns--
		c.host.tidyShareLocked(kp.key.owner())
	}
	if c.via != nil {
		p.releaseTunnelLocked(c.via)
		c.via = nil
	}
	go c.client.Close() // Close may block on a dead TCP peer; Wait in watch reaps it
	p.checkDrainedLocked()
}

// keepalive probes c periodically with its own timeout and kills it if the server stops answering.
func (p *Pool) keepalive(c *conn) {
	defer p.wg.Done()
	tick := time.NewTicker(p.cfg.KeepaliveInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		p.mu.Lock()
		dead := c.dead
		p.mu.Unlock()
		if dead {
			return
		}
		if err := p.probe(c); err != nil {
			p.log.Warn("ssh keepalive failed", "key", c.kp.key.String(), "err", err)
			p.mu.Lock()
			p.killLocked(c)
			p.serveWaitersLocked(c.kp)
			p.mu.Unlock()
			return
		}
	}
}

// probe sends keepalive@openssh.com and waits at most KeepaliveTimeout for the answer.
func (p *Pool) probe(c *conn) error {
	done := make(chan error, 1)
	go func() {
		t0 := time.Now()
		_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
		if w := wireOf(c.client); err == nil && w != nil {
			w.noteRTT(time.Since(t0)) // for Pool.RTT
		}
		done <- err
	}()
	t := time.NewTimer(p.cfg.KeepaliveTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		c.client.Close() // unblocks SendRequest
		return fmt.Errorf("no keepalive answer within %s", p.cfg.KeepaliveTimeout)
	}
}

// janitor closes connections that stayed idle longer than IdleTimeout.
func (p *Pool) janitor() {
	defer p.wg.Done()
	tick := time.NewTicker(min(p.cfg.IdleTimeout/4, p.cfg.SFTPIdleTimeout/2, 30*time.Second))
	defer tick.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		p.evictIdle(time.Now())
	}
}

func (p *Pool) evictIdle(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeIdleLocked(now.Add(-p.cfg.SFTPIdleTimeout))
	for k, kp := range p.keys {
		for _, c := range append([]*conn(nil), kp.conns...) {
			if c.inUse == 0 && c.sftpUse == 0 && c.tunnels == 0 && (c.shell == nil || c.shell.queued == 0) && now.Sub(c.lastUsed) > p.cfg.IdleTimeout {
				p.log.Info("ssh connection idle, closing", "key", kp.key.String())
				p.killLocked(c)
			}
		}
		if len(kp.conns) == 0 && len(kp.waiters) == 0 && kp.dialing == 0 && kp.authErr == nil {
			delete(p.keys, k)
		}
	}
	for addr, h := range p.hosts {
		for owner := range h.owners { // a share kept for a backoff that has run out
			h.tidyShareLocked(owner)
		}
		if h.unusedLocked() {
			delete(p.hosts, addr)
		}
	}
}

// isConnBroken reports whether err means the SSH connection (not just the operation) failed: the
// pool's one classification of such errors (a channel or SFTP request that ended with the
// connection, a failed socket read or write).
func isConnBroken(err error) bool {
	if err == nil {
		return false
	}
	var ne *net.OpError
	return errors.Is(err, ErrConnLost) || errors.Is(err, sftp.ErrSSHFxConnectionLost) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "EOF") || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &ne)
}
