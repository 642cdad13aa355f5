package service

import (
	"log/slog"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/config"
)

// TestMemoryLimitFromBudgets: the limit is the sum of the byte budgets plus the fixed
// allowance, and follows each budget.
func TestMemoryLimitFromBudgets(t *testing.T) {
	cfg := config.Default()
	// Defaults: 128 MiB command output + 64 MiB downloads + 128 MiB kept listings + 4 workers ×
	// 16 streams × (16 × 255 KiB blocks + 2 MiB window) + 128 MiB.
	const mib = 1 << 20
	const stream = 16*255<<10 + 2*mib
	if got, want := MemoryLimit(cfg), int64(128*mib+64*mib+128*mib+4*16*stream+128*mib); got != want {
		t.Fatalf("default limit %d MiB, want %d MiB", got/mib, want/mib)
	}
	cfg.HTTP.CommandOutputBudgetBytes = 512 * mib
	cfg.HTTP.CommandMaxOutputBytes = 64 * mib
	cfg.HTTP.DownloadBufferBudgetBytes = 32 * mib
	cfg.Transfer.Workers, cfg.Transfer.MaxStreams = 1, 8
	if got, want := MemoryLimit(cfg), int64(512*mib+32*mib+128*mib+1*16*stream+128*mib); got != want {
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

// TestFloorPercent: the GOGC that makes the heap goal max(floor, 2 × live).
func TestFloorPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		floor, live uint64
		want        int
	}{
		{64 * mib, 0, 100},             // no collection yet: Go's default
		{64 * mib, 8 * mib, 700},       // goal 64 MiB = 8 MiB × (1 + 700/100)
		{64 * mib, 32 * mib, 100},      // twice what is live reaches the floor
		{64 * mib, 500 * mib, 100},     // much live: Go's default
		{64 * mib, 1, maxFloorPercent}, // almost nothing live: capped
	} {
		if got := floorPercent(tc.floor, tc.live); got != tc.want {
			t.Errorf("floorPercent(%d, %d) = %d, want %d", tc.floor, tc.live, got, tc.want)
		}
	}
}

// TestServiceKeepsHeapFloor: while the service runs, every collection leaves the heap goal at
// gc_min_heap_bytes or more although little is live; Stop puts Go's default back; an operator's
// GOGC is left alone.
func TestServiceKeepsHeapFloor(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	cfg := config.Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Addr = "127.0.0.1:0"
	cfg.GCMinHeapBytes = 512 << 20 // far above what this test keeps live

	t.Setenv("GOGC", "")
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {
		for i := 0; ; i++ {
			runtime.GC() // the floor's finalizer runs after the cycle, on the finalizer goroutine
			goal := readMetric("/gc/heap/goal:bytes")
			if goal >= uint64(cfg.GCMinHeapBytes)*9/10 {
				break
			}
			if i == 1000 {
				t.Fatalf("heap goal %d MiB after %d collections, want about %d MiB", goal>>20, i, cfg.GCMinHeapBytes>>20)
			}
			time.Sleep(time.Millisecond) // let the finalizer goroutine run
		}
	})
	if got := readMetric("/gc/gogc:percent"); got != 100 {
		t.Errorf("GOGC %d after Stop, want 100", got)
	}

	debug.SetGCPercent(150) // as the runtime would from the operator's GOGC
	t.Setenv("GOGC", "150")
	startStop(t, cfg, slog.New(slog.DiscardHandler), func() {
		runtime.GC()
		if got := readMetric("/gc/gogc:percent"); got != 150 {
			t.Fatalf("GOGC %d, want the operator's 150 kept", got)
		}
	})
}

// readMetric reads one uint64 runtime metric.
func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
