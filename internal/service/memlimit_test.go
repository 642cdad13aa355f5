package service

import (
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/sshapi/sshapi/internal/config"
)

// TestMemoryLimitFromBudgets: the limit is the sum of the byte budgets plus the fixed
// allowance, and follows each budget.
func TestMemoryLimitFromBudgets(t *testing.T) {
	cfg := config.Default()
	// Defaults: 128 MiB command output + 64 MiB downloads + 128 MiB kept listings + 4 workers ×
	// 16 streams × (16 × 256 KiB blocks + 2 MiB window) + 128 MiB.
	const mib = 1 << 20
	if got, want := MemoryLimit(cfg), int64(128*mib+64*mib+128*mib+4*16*6*mib+128*mib); got != want {
		t.Fatalf("default limit %d MiB, want %d MiB", got/mib, want/mib)
	}
	cfg.HTTP.CommandOutputBudgetBytes = 512 * mib
	cfg.HTTP.CommandMaxOutputBytes = 64 * mib
	cfg.HTTP.DownloadBufferBudgetBytes = 32 * mib
	cfg.Transfer.Workers, cfg.Transfer.MaxStreams = 1, 8
	if got, want := MemoryLimit(cfg), int64(512*mib+32*mib+128*mib+1*16*6*mib+128*mib); got != want {
		t.Fatalf("limit %d MiB, want %d MiB", got/mib, want/mib)
	}
}

// TestServiceSetsMemoryLimit: starting the service sets the runtime's soft memory limit to
// MemoryLimit(cfg), read back with debug.SetMemoryLimit(-1), unless GOMEMLIMIT is set.
func TestServiceSetsMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	cfg.HTTP.DownloadBufferBudgetBytes = 48 << 20 // a limit no default would give

	t.Setenv("GOMEMLIMIT", "")
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {
		if got, want := debug.SetMemoryLimit(-1), MemoryLimit(cfg); got != want {
			t.Fatalf("memory limit %d, want %d", got, want)
		}
	})

	debug.SetMemoryLimit(1 << 40) // as the runtime would from the operator's GOMEMLIMIT
	t.Setenv("GOMEMLIMIT", "1TiB")
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {
		if got := debug.SetMemoryLimit(-1); got != 1<<40 {
			t.Fatalf("memory limit %d, want the operator's GOMEMLIMIT kept", got)
		}
	})
}

// TestServiceSetsGCPercent: starting the service sets the collector's GOGC to gc_percent,
// read back with debug.SetGCPercent, unless GOGC is set.
func TestServiceSetsGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	cfg.GCPercent = 321 // a percent no default would give

	t.Setenv("GOGC", "")
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {
		if got := debug.SetGCPercent(cfg.GCPercent); got != cfg.GCPercent {
			t.Fatalf("GC percent %d, want %d", got, cfg.GCPercent)
		}
	})

	debug.SetGCPercent(150) // as the runtime would from the operator's GOGC
	t.Setenv("GOGC", "150")
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {
		if got := debug.SetGCPercent(150); got != 150 {
			t.Fatalf("GC percent %d, want the operator's GOGC kept", got)
		}
	})
}
