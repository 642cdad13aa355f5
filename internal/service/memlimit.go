package service

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/sshapi/sshapi/internal/config"
)

// memoryAllowance is the memory the service may use beyond its configured byte budgets: the Go
// runtime, idle pooled connections, listings' bounded heaps, JSON bodies, database caches and
// what is not budgeted per request.
const memoryAllowance = 128 << 20

// MemoryLimit is the Go soft memory limit the service derives from cfg: the sum of its byte
// budgets (buffered command output, download buffers, transfer copy buffers and channel
// windows) plus memoryAllowance. Without a limit the garbage collector lets the heap grow to
// twice what is live (GOGC=100), so a process whose budgets are full would run to about twice
// them; with it the collector works harder as the heap nears the limit instead.
func MemoryLimit(cfg config.Config) int64 {
	return cfg.HTTP.BudgetBytes() + cfg.Transfer.BufferBytes() + memoryAllowance
}

// startGCFloor starts a heap floor of cfg.GCMinHeapBytes (gcFloor) unless it is 0 or the
// operator set GOGC (which the runtime has already applied), and logs which holds. Like the
// memory limit it is process-wide. It returns nil when no floor was started.
func startGCFloor(cfg config.Config, log *slog.Logger) *gcFloor {
	if v := os.Getenv("GOGC"); v != "" {
		log.Info("Go GC percent from GOGC", "GOGC", v)
		return nil
	}
	if cfg.GCMinHeapBytes <= 0 {
		return nil
	}
	g := newGCFloor(uint64(cfg.GCMinHeapBytes))
	g.Start()
	log.Info("Go heap floor set from gc_min_heap_bytes", "bytes", cfg.GCMinHeapBytes)
	return g
}

// applyMemoryLimit sets the runtime's soft memory limit to MemoryLimit(cfg) unless the operator
// set GOMEMLIMIT (which the runtime has already applied), and logs which limit holds. The limit
// is process-wide: with several services in one process (tests) the last one started sets it.
func applyMemoryLimit(cfg config.Config, log *slog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v, "bytes", debug.SetMemoryLimit(-1))
		return
	}
	limit := MemoryLimit(cfg)
	debug.SetMemoryLimit(limit)
	log.Info("Go memory limit set from the configured budgets", "bytes", limit, "mib", limit>>20)
}
