package transfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/wanem"
)

// systems resolves test system names to sshd servers (optionally through a proxy address).
type systems struct {
	mu sync.Mutex
	m  map[string]System
}

func (s *systems) Resolve(_ context.Context, owner, system string) (System, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sys, ok := s.m[owner+"/"+system]
	if !ok {
		return System{}, ErrSystem
	}
	return sys, nil
}

// add registers srv as owner's system name, reached at addr (srv.Addr when empty).
func (s *systems) add(owner, name string, srv *sshtest.Server, addr string) {
	if addr == "" {
		addr = srv.Addr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]System{}
	}
	s.m[owner+"/"+name] = System{Target: sshpool.Target{
		Key:         sshpool.Key{System: owner + "/" + name, User: srv.User, Credential: "test"},
		Addr:        addr,
		Config:      srv.ClientConfig(),
		MaxSessions: 10,
	}}
}

// harness is an engine on a real database, a real pool and real sshd servers.
type harness struct {
	t      testing.TB
	dbPath string
	pool   *sshpool.Pool
	sys    *systems
	cfg    Config
	eng    *Engine
	log    *slog.Logger
	stopFn func()
	// wrap, when set, stands between the next started engine and its database.
	wrap func(Persistence) Persistence
}

func testConfig() Config {
	return Config{RetryBase: 100 * time.Millisecond, RetryMax: time.Second, LeaseTTL: 3 * time.Second,
		ReapInterval: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond, OpenTimeout: 10 * time.Second}
}

// testPoolConfig is the pool configuration of every harness (benchmarks may change it).
var testPoolConfig sshpool.Config

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("SSHAPI_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	pool := sshpool.New(testPoolConfig, log, nil)
	_ = pool.Start(t.Context())
	t.Cleanup(func() { _ = pool.Stop(context.Background()) })
	h := &harness{t: t, dbPath: filepath.Join(t.TempDir(), "transfers.db"), pool: pool, sys: &systems{}, cfg: cfg, log: log}
	h.start()
	return h
}

// start opens the database and starts a fresh engine on it.
func (h *harness) start() {
	h.t.Helper()
	db, err := OpenSQLite(h.t.Context(), h.dbPath)
	if err != nil {
		h.t.Fatal(err)
	}
	var p Persistence = db
	if h.wrap != nil {
		p = h.wrap(db)
	}
	eng, err := New(h.cfg, Deps{DB: p, Pool: h.pool, Resolver: h.sys, Log: h.log})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := eng.Start(h.t.Context()); err != nil {
		h.t.Fatal(err)
	}
	h.eng = eng
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			h.t.Errorf("stop engine: %v", err)
		}
		db.Close()
	}
	h.t.Cleanup(stop)
	h.stopFn = stop
}

// stop stops the current engine (as a restart of sshapi would).
func (h *harness) stop() { h.stopFn() }

func (h *harness) submit(owner string, req Request) *Transfer {
	h.t.Helper()
	tr, _, err := h.eng.Submit(h.t.Context(), owner, req)
	if err != nil {
		h.t.Fatalf("submit: %v", err)
	}
	return tr
}

// wait polls until transfer id is terminal (or cond holds) and returns it.
func (h *harness) wait(owner, id string, timeout time.Duration, cond func(*Transfer) bool) *Transfer {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		tr, err := h.eng.Get(h.t.Context(), owner, id)
		if err != nil {
			h.t.Fatal(err)
		}
		if (cond == nil && tr.Status.Terminal()) || (cond != nil && cond(tr)) {
			return tr
		}
		if cond != nil && tr.Status.Terminal() {
			h.t.Fatalf("transfer ended before the condition held: %+v", tr)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("transfer %s: timed out waiting; last state %+v", id, tr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// owned makes path belong to the test sshd user, as a file it created would.
func owned(t *testing.T, srv *sshtest.Server, paths ...string) {
	t.Helper()
	u, err := user.Lookup(srv.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
}

// randomFile writes size pseudo-random bytes to p quickly and returns their sha256.
func randomFile(t testing.TB, p string, size int64, seed uint64) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1})
	h := sha256.New()
	buf := make([]byte, 4<<20)
	for left := size; left > 0; {
		n := min(int64(len(buf)), left)
		_, _ = rng.Read(buf[:n])
		h.Write(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		left -= n
	}
	return hex.EncodeToString(h.Sum(nil))
}

func fileSHA(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// temps lists leftover temporary files under dir.
func temps(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".sshapi-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// slowProxy puts a rate-limited emulated link in front of srv so a transfer lasts long enough
// to be interrupted.
func slowProxy(t *testing.T, srv *sshtest.Server, rate int64) string {
	t.Helper()
	p, err := wanem.New(wanem.Config{Upstream: srv.Addr, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p.Addr().String()
}
