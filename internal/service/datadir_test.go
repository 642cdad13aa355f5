package service

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/config"
)

// withUmask runs the rest of the test under umask mask. The umask is process-wide, so such a
// test must not call t.Parallel.
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// startStop starts the service on cfg, runs fn while it serves, and stops it.
func startStop(t *testing.T, cfg config.Config, log *slog.Logger, fn func()) {
	t.Helper()
	svc, err := New(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	fn()
	// The modes are the point here, not how fast the service stops: a CI run with every
	// package's tests at once once took over 10 s to stop River (TestOlderDataDirTightened).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := svc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// wantMode fails the test unless the file at p exists with permission bits want.
func wantMode(t *testing.T, p string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %04o, want %04o", filepath.Base(p), got, want)
	}
}

// TestDataDirCreatedPrivate starts the service on a new data directory under umask 022, with
// which SQLite alone would make 0644 databases: the directory is 0700 and the databases, their
// -wal and -shm files and the generated secrets are 0600 while it runs.
func TestDataDirCreatedPrivate(t *testing.T) {
	withUmask(t, 0o022)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "var", "data")
	cfg.Addr = "127.0.0.1:0"
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {
		wantMode(t, cfg.DataDir, 0o700)
		wantMode(t, filepath.Dir(cfg.DataDir), 0o700) // a missing parent too
		for _, f := range []string{DatabaseFile, DatabaseFile + "-wal", DatabaseFile + "-shm",
			TransfersFile, TransfersFile + "-wal", TransfersFile + "-shm", MasterKeyFile, JWTSecretFile} {
			wantMode(t, filepath.Join(cfg.DataDir, f), 0o600)
		}
	})
}

// TestDataDirWritableByOthersRefused: a data directory group or other users can write (so
// they could swap the database or the secrets) stops the start, and the dev token command,
// with an error naming the directory and the fix; nothing is created in it.
func TestDataDirWritableByOthersRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o770, 0o702, 0o777 | os.ModeSticky} {
		cfg := config.Default()
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
		cfg.Addr = "127.0.0.1:0"
		if err := os.Mkdir(cfg.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cfg.DataDir, mode); err != nil {
			t.Fatal(err)
		}
		svc, err := New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			svc.Stop(t.Context())
			t.Fatalf("mode %v: the service started", mode)
		}
		if !errors.Is(err, ErrDataDirUnsafe) || !strings.Contains(err.Error(), cfg.DataDir) ||
			!strings.Contains(err.Error(), "chmod 700 "+cfg.DataDir) {
			t.Errorf("mode %v: error %q, want ErrDataDirUnsafe naming the dir and chmod 700", mode, err)
		}
		if _, err := DevSecret(cfg.DataDir); !errors.Is(err, ErrDataDirUnsafe) {
			t.Errorf("mode %v: DevSecret: %v, want ErrDataDirUnsafe", mode, err)
		}
		if ents, _ := os.ReadDir(cfg.DataDir); len(ents) != 0 {
			t.Errorf("mode %v: created %v in the refused dir", mode, ents)
		}
	}
}

// TestOlderDataDirTightened: a data directory as earlier versions left it (0755, databases
// 0644) is made private at the start, said once in the log, and the databases keep their data.
func TestOlderDataDirTightened(t *testing.T) {
	withUmask(t, 0o022)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {})
	db, tdb := filepath.Join(cfg.DataDir, DatabaseFile), filepath.Join(cfg.DataDir, TransfersFile)
	// The -wal and -shm files usually go when the last connection closes; an older version
	// killed while running leaves them. SQLite leaves the -wal now and then after a clean close
	// too (its last connection could not checkpoint), with committed pages in it: such a file is
	// kept as it is and only opened up, or the test would lose those pages or see it already
	// private.
	for _, p := range []string{db + "-wal", tdb + "-shm"} {
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	for _, p := range []string{cfg.DataDir, db, db + "-wal", tdb, tdb + "-shm"} {
		mode := os.FileMode(0o644)
		if p == cfg.DataDir {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuffer
	startStop(t, cfg, slog.New(slog.NewJSONHandler(&logs, nil)), func() {
		wantMode(t, cfg.DataDir, 0o700)
		for _, p := range []string{db, db + "-wal", db + "-shm", tdb, tdb + "-wal", tdb + "-shm"} {
			wantMode(t, p, 0o600)
		}
	})
	said := tightenings(&logs)
	want := []any{cfg.DataDir, db, db + "-wal", tdb, tdb + "-shm"}
	if len(said) != 1 || !reflect.DeepEqual(said[0], want) {
		t.Errorf("logged tightenings %v, want one of %v", said, want)
	}
	// A private data directory is left as it is, without a word.
	var again syncBuffer
	startStop(t, cfg, slog.New(slog.NewJSONHandler(&again, nil)), func() {})
	if said := tightenings(&again); len(said) != 0 {
		t.Errorf("logged tightenings %v of a private data dir", said)
	}
}

// tightenings are the paths of each tightening the service logged.
func tightenings(logs *syncBuffer) [][]any {
	var out [][]any
	for _, l := range logs.lines() {
		if l["msg"] == "made data directory files private: group or other users could read them" {
			paths, _ := l["paths"].([]any)
			out = append(out, paths)
		}
	}
	return out
}
