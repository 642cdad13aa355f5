package service

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// maxFloorPercent caps the GOGC the floor sets while almost nothing is live, so a goal computed
// from a tiny live heap stays a number the runtime handles well.
const maxFloorPercent = 100_000

// gcFloor keeps the garbage collector's heap goal at or above floor bytes while what is live is
// small, and leaves Go's GOGC=100 (the goal twice what is live) once what is live exceeds half
// the floor. A transfer's garbage is mostly SSH packets that die as soon as they are copied on,
// while a few MB stay live; with the goal twice that, the collector ran every few MB and took a
// fifth of the process's CPU. A flat higher GOGC would do the same but multiply the heap of a
// process whose budgets are full; the floor costs at most floor bytes more than Go's default and
// never more where much is live. The soft memory limit still applies on top.
//
// After each collection (a finalizer on a sentinel object, re-armed every cycle, runs on the
// runtime's finalizer goroutine) it reads what the collection left live and sets GOGC so that
// the next goal is max(floor, 2 × live). Stop ends the chain at the next cycle and puts GOGC
// back to 100.
type gcFloor struct {
	floor uint64

	mu      sync.Mutex
	stopped bool
}

// newGCFloor returns a floor of floor bytes; Start begins it.
func newGCFloor(floor uint64) *gcFloor { return &gcFloor{floor: floor} }

// Start sets GOGC for what is live now and re-sets it after every collection until Stop.
func (g *gcFloor) Start() {
	g.adjust()
	g.arm()
}

// Stop ends the adjustments and restores GOGC=100. It is safe to call more than once.
func (g *gcFloor) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopped {
		g.stopped = true
		debug.SetGCPercent(100)
	}
}

// sentinel is the object whose collection marks the end of a GC cycle.
type sentinel struct{ _ [16]byte } // not zero-sized: zero-sized objects may never be freed

// arm allocates a sentinel that, once collected, adjusts GOGC and arms the next one.
func (g *gcFloor) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if g.adjust() {
			g.arm()
		}
	})
}

// adjust sets GOGC from the live heap the last collection measured; it reports false once
// stopped.
func (g *gcFloor) adjust() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	debug.SetGCPercent(floorPercent(g.floor, liveHeap()))
	return true
}

// floorPercent is the GOGC that makes the heap goal max(floor, 2 × live).
func floorPercent(floor, live uint64) int {
	if live == 0 || floor <= 2*live {
		return 100
	}
	p := (floor - live) * 100 / live
	return int(min(p, maxFloorPercent))
}

// liveHeap is the heap the last collection left live ("/gc/heap/live:bytes"), 0 before one ran.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
