// Package auditspool is an instance's local, durable, bounded journal of audit entries that
// could not be written to the database, and the drainer that moves them there once it is back.
//
// The promise it keeps: an action's audit entry is committed before the action's answer is
// sent, and a kill -9 loses none. When the database write fails (the database is restarting,
// failing over, unreachable), the API appends the entry here instead; Append returns only once
// the entry is in a file that has been fsynced and renamed into place (and the directory
// fsynced), so the answer that follows — the operation's real status — is backed by a record
// that survives a crash of the process or the machine. Concurrent appenders share one file and
// one fsync (group commit): whoever finds the writer free writes everything queued meanwhile.
//
// Draining: Start runs one goroutine (stopped by Stop) that, while the spool holds entries,
// appends each file's entries to the database in file order and deletes the file once the
// append committed. Entries carry an id (store.AuditEntry.ID) that the database stores once,
// so a file replayed after a crash between the commit and the delete, or an entry whose first,
// failed database write had in fact committed, is not duplicated.
//
// Bound: at most Max entries are held (those on disk and those being written); Append beyond
// it fails with ErrFull, and Full lets the API refuse audited requests (503) before their
// operation runs rather than carry out actions it could not record.
//
// Ownership and several instances: the directory is locked (flock) by one process at a time;
// Open fails while another holds it, so two instances never drain or count the same files.
// Entries spooled by an instance are in the database only once that instance (or another
// started on the same directory) drains them: an instance that dies and is never started again
// on its directory leaves them on its disk (Pending tells how many; the operator moves the
// files to a running instance's spool directory, whose drainer picks them up at its next
// Open, or starts an instance on the directory). Until they are drained, audit queries on any
// instance do not show them.
package auditspool

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sshapi/sshapi/internal/store"
)

// ErrFull is Append's error when the spool holds its maximum of entries.
var ErrFull = errors.New("audit spool full")

// Appender is where drained entries go (store.AccessStore's AppendAuditBatch).
type Appender interface {
	// AppendAuditBatch records p.Entries atomically, skipping those whose ID is stored already.
	AppendAuditBatch(ctx context.Context, p *store.AuditAppendParams) error
}

// Config places and bounds a spool.
type Config struct {
	// Dir is the spool's directory, created if missing (mode 0700).
	Dir string
	// Max is the most entries held at once (at least 1).
	Max int
	// Interval is how often the drainer retries while entries are held (default 1s).
	Interval time.Duration
}

// drainBatch bounds the entries of one database append while draining.
const drainBatch = 256

// drainTimeout bounds one database append while draining.
const drainTimeout = 10 * time.Second

// fileSuffix names committed spool files; anything else (a temporary file a crash left) is
// removed at Open, its entries never having been acknowledged.
const fileSuffix = ".ndjson"

// Spool is an open spool directory. Its methods are safe for concurrent use.
type Spool struct {
	cfg  Config
	to   Appender
	log  *slog.Logger
	lock *os.File

	mu    sync.Mutex
	count int    // entries in files plus entries being written
	cur   *batch // entries waiting for the next group write
	seq   uint64 // orders files written by this process after those found at Open
	base  string // this Open's file-name prefix, later than any file found

	wmu   sync.Mutex // one group write at a time
	drmu  sync.Mutex // one drain at a time
	stop  context.CancelFunc
	done  chan struct{}
	start sync.Mutex
}

// batch is one group write: its entries and, once written, its outcome.
type batch struct {
	entries []store.AuditEntry
	written bool
	err     error
}

// Open locks cfg.Dir, removes what an interrupted write left there and counts the entries
// held. Close releases it.
func Open(cfg Config, to Appender, log *slog.Logger) (*Spool, error) {
	if cfg.Dir == "" {
		return nil, errors.New("audit spool: no directory")
	}
	if cfg.Max < 1 {
		return nil, fmt.Errorf("audit spool %s: max must be at least 1", cfg.Dir)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit spool: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit spool: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("audit spool %s is in use by another process (each instance needs its own directory): %w", cfg.Dir, err)
	}
	s := &Spool{cfg: cfg, to: to, log: log, lock: lock, cur: &batch{}}
	names, err := s.files()
	if err != nil {
		s.Close()
		return nil, err
	}
	base := time.Now().UnixNano()
	for _, name := range names {
		if n, err := strconv.ParseInt(name[:20], 10, 64); err == nil && n >= base {
			base = n + 1 // files from a clock ahead of ours: ours still sort after them
		}
		es, err := s.read(name)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.count += len(es)
	}
	if err := s.removeTemps(); err != nil {
		s.Close()
		return nil, err
	}
	s.base = fmt.Sprintf("%020d", base)
	if s.count > 0 {
		log.Warn("audit spool holds entries not yet in the database; draining them", "dir", cfg.Dir, "entries", s.count)
	}
	return s, nil
}

// Close releases the directory's lock. The files stay for the next Open.
func (s *Spool) Close() error {
	return s.lock.Close()
}

// Pending is the number of entries held (written or being written).
func (s *Spool) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// Full reports whether the spool holds its maximum: a further Append would fail.
func (s *Spool) Full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count >= s.cfg.Max
}

// Append stores es durably and returns once they are (nil), or fails: ErrFull when they do
// not fit, or the file system's error. An entry without an ID is given one. Concurrent calls
// share a write (group commit).
func (s *Spool) Append(ctx context.Context, es ...store.AuditEntry) error {
	if len(es) == 0 {
		return nil
	}
	for i := range es {
		if es[i].ID == "" {
			es[i].ID = store.NewAuditID()
		}
		if es[i].Time.IsZero() {
			es[i].Time = time.Now()
		}
	}
	s.mu.Lock()
	if s.count+len(es) > s.cfg.Max {
		s.mu.Unlock()
		return fmt.Errorf("%w (%d entries)", ErrFull, s.cfg.Max)
	}
	s.count += len(es)
	b := s.cur
	b.entries = append(b.entries, es...)
	s.mu.Unlock()

	s.wmu.Lock()
	if !b.written {
		s.mu.Lock()
		s.cur = &batch{} // later appenders wait for the next write
		s.seq++
		name := fmt.Sprintf("%s-%010d%s", s.base, s.seq, fileSuffix)
		s.mu.Unlock()
		b.err = s.write(name, b.entries)
		b.written = true
		if b.err != nil {
			s.mu.Lock()
			s.count -= len(b.entries)
			s.mu.Unlock()
		}
	}
	err := b.err
	s.wmu.Unlock()
	return err
}

// write stores es in file name: a temporary file, fsynced, renamed into place, the directory
// fsynced.
func (s *Spool) write(name string, es []store.AuditEntry) error {
	f, err := os.CreateTemp(s.cfg.Dir, "tmp-")
	if err != nil {
		return fmt.Errorf("audit spool: %w", err)
	}
	tmp := f.Name()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range es {
		if err = enc.Encode(&es[i]); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.cfg.Dir, name))
	}
	if err == nil {
		err = s.syncDir()
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("audit spool: write: %w", err)
	}
	return nil
}

func (s *Spool) syncDir() error {
	d, err := os.Open(s.cfg.Dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// files lists the committed spool files, oldest first.
func (s *Spool) files() ([]string, error) {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("audit spool: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), fileSuffix) && len(e.Name()) > 20 {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

// removeTemps removes temporary files an interrupted write left (never acknowledged).
func (s *Spool) removeTemps() error {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("audit spool: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "tmp-") {
			if err := os.Remove(filepath.Join(s.cfg.Dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("audit spool: %w", err)
			}
		}
	}
	return nil
}

// read returns the entries of file name.
func (s *Spool) read(name string) ([]store.AuditEntry, error) {
	f, err := os.Open(filepath.Join(s.cfg.Dir, name))
	if err != nil {
		return nil, fmt.Errorf("audit spool: %w", err)
	}
	defer f.Close()
	var out []store.AuditEntry
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var e store.AuditEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("audit spool: %s: %w", name, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Drain appends the held entries to the database, file by file in order, deleting each file
// once its entries are committed, and returns how many entries it moved. It stops at the
// first failure (the database is still away); an entry the database refuses as invalid is
// logged and dropped, so it cannot hold up the others.
func (s *Spool) Drain(ctx context.Context) (int, error) {
	s.drmu.Lock()
	defer s.drmu.Unlock()
	names, err := s.files()
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, name := range names {
		es, err := s.read(name)
		if err != nil {
			return moved, err
		}
		for i := 0; i < len(es); i += drainBatch {
			if err := s.appendChunk(ctx, es[i:min(i+drainBatch, len(es))]); err != nil {
				return moved, err
			}
		}
		if err := os.Remove(filepath.Join(s.cfg.Dir, name)); err != nil {
			return moved, fmt.Errorf("audit spool: %w", err)
		}
		if err := s.syncDir(); err != nil {
			return moved, fmt.Errorf("audit spool: %w", err)
		}
		s.mu.Lock()
		s.count -= len(es)
		s.mu.Unlock()
		moved += len(es)
	}
	return moved, nil
}

// appendChunk appends es in one transaction, or one by one when the batch holds an entry the
// database refuses.
func (s *Spool) appendChunk(ctx context.Context, es []store.AuditEntry) error {
	actx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	err := s.to.AppendAuditBatch(actx, &store.AuditAppendParams{Entries: es})
	if !errors.Is(err, store.ErrInvalid) {
		return err
	}
	for _, e := range es {
		actx, cancel := context.WithTimeout(ctx, drainTimeout)
		err := s.to.AppendAuditBatch(actx, &store.AuditAppendParams{Entries: []store.AuditEntry{e}})
		cancel()
		switch {
		case errors.Is(err, store.ErrInvalid):
			s.log.Error("audit spool: the database refuses an entry; dropped", "request_id", e.RequestID, "action", e.Action, "err", err)
		case err != nil:
			return err
		}
	}
	return nil
}

// Start drains in the background until Stop: at once and every Config.Interval while entries
// are held. A database still away is logged once, not at every attempt.
func (s *Spool) Start(ctx context.Context) {
	s.start.Lock()
	defer s.start.Unlock()
	if s.stop != nil {
		return
	}
	ctx, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		failing := false
		for {
			if s.Pending() > 0 {
				n, err := s.Drain(ctx)
				switch {
				case err != nil && ctx.Err() == nil:
					if !failing {
						s.log.Warn("audit spool: cannot drain into the database yet; retrying", "entries_moved", n, "entries_held", s.Pending(), "err", err)
					}
					failing = true
				case n > 0:
					failing = false
					s.log.Info("audit spool: entries moved into the database", "entries", n, "entries_held", s.Pending())
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the background drain and waits for it. Entries still held stay in their files.
func (s *Spool) Stop() {
	s.start.Lock()
	stop, done := s.stop, s.done
	s.stop = nil
	s.start.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}
