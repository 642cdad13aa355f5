package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// selfCPU is the user+system CPU seconds of this process and its waited-for children.
func selfCPU() float64 {
	own, children := splitCPU()
	return own + children
}

// splitCPU is the user+system CPU seconds of this process, and of its waited-for children.
func splitCPU() (own, children float64) {
	var s, c syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}

// procTime is one process's CPU in clock ticks (1/100 s): its own user+system time, that of
// the children it has waited for, and its parent.
type procTime struct {
	self, children float64
	ppid           int
}

// procTicks reads every process in the trees rooted at pids, roots included. It walks the trees
// down through /proc/PID/task/TID/children, reading only their processes: scanning all of /proc
// every 100 ms cost the bench process (whose CPU the reports charge to sshapi) about 4 ms a sample
// on a machine shared with other work. Without those files (a kernel without
// CONFIG_PROC_CHILDREN) it scans all of /proc.
func procTicks(pids []int) map[int]procTime {
	if _, err := os.Stat("/proc/self/task"); err == nil {
		if out, ok := procTicksWalk(pids); ok {
			return out
		}
	}
	return procTicksScan(pids)
}

// readProcStat reads /proc/PID/stat.
func readProcStat(pid string) (procTime, bool) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procTime{}, false
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return procTime{}, false
	}
	f := strings.Fields(string(stat[i+1:])) // state ppid ... utime(12) stime(13) cutime(14) cstime(15)
	if len(f) < 15 {
		return procTime{}, false
	}
	var v [4]float64
	for i, k := range f[11:15] {
		v[i], _ = strconv.ParseFloat(k, 64)
	}
	t := procTime{self: v[0] + v[1], children: v[2] + v[3]}
	t.ppid, _ = strconv.Atoi(f[1])
	return t, true
}

// procTicksWalk is procTicks through the children files; ok is false when a root's could not be
// read.
func procTicksWalk(pids []int) (map[int]procTime, bool) {
	out := map[int]procTime{}
	queue := append([]int(nil), pids...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if _, seen := out[p]; seen {
			continue
		}
		ps := strconv.Itoa(p)
		t, ok := readProcStat(ps)
		if !ok {
			continue // gone
		}
		out[p] = t
		tasks, err := os.ReadDir("/proc/" + ps + "/task")
		if err != nil {
			continue
		}
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + ps + "/task/" + task.Name() + "/children")
			if err != nil {
				if os.IsNotExist(err) && task.Name() == ps {
					return nil, false
				}
				continue
			}
			for _, c := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(c); err == nil {
					queue = append(queue, n)
				}
			}
		}
	}
	return out, true
}

// procTicksScan is procTicks by reading every process in /proc.
func procTicksScan(pids []int) map[int]procTime {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	all := map[int]procTime{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, ok := readProcStat(e.Name()); ok {
			all[p] = t
		}
	}
	in := map[int]bool{}
	for _, p := range pids {
		in[p] = true
	}
	out := map[int]procTime{}
	for p, t := range all {
		for q, hops := p, 0; q > 1 && hops < 64; q, hops = all[q].ppid, hops+1 {
			if in[q] {
				out[p] = t
				break
			}
		}
	}
	return out
}

// cpuMeter follows the CPU of the sshd process trees while a run lasts. Session processes come
// and go, so it samples every process of the trees every 100 ms and keeps the last value seen
// per process: its own time and its waited-for children's.
//
// A child that ended is counted once, through its parent: the parent's children's time grew by
// the child's whole time (its own and that of everything it waited for) if the parent waited
// for it, and not at all if nobody did or the kernel reaped it without accounting (the privsep
// monitor of a non-root OpenSSH session: its post-auth child's time never reaches the listener).
// So per process the meter takes the larger of what its children's time grew by and what was
// seen of its ended children (each reckoned the same way, down the tree), plus its own time and
// that of its children still running. Adding both, as this meter once did for grandchildren, counted
// a long command twice when its parent waited for it and ended just after (a shell's `tar`).
// Processes shorter than a sample count through a parent that waited for them; what is missed
// is the unseen part of a process nobody in the trees accounted for.
type cpuMeter struct {
	pids  []int
	stop  chan struct{}
	done  chan struct{}
	base  map[int]procTime
	last  map[int]procTime
	own   float64          // CPU seconds the sampling itself took (its thread's), set before done closes
	alive map[int]procTime // the processes the last sample saw, set before done closes
}

// startCPUMeter starts sampling the trees rooted at pids. The sampling runs on a thread of its
// own (a goroutine locked to it), whose CPU time is the meter's cost: Own, which callers take
// off the bench process's CPU, since reading /proc every 100 ms is the benchmark's doing, not
// the measured client's (about 0.15 ms per request at 50 closed-loop clients of `uptime`, where
// the sshd trees have many processes).
func startCPUMeter(pids []int) *cpuMeter {
	m := &cpuMeter{pids: pids, stop: make(chan struct{}), done: make(chan struct{}), last: map[int]procTime{}}
	started := make(chan struct{})
	go func() { // owned by m: Stop waits for it
		defer close(m.done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		t0 := threadCPU()
		m.base = procTicks(pids)
		close(started)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.stop:
				m.alive = m.sample()
				m.own = threadCPU() - t0
				return
			case <-t.C:
			}
		}
	}()
	<-started
	return m
}

// threadCPU is the CPU seconds of the calling thread.
func threadCPU() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// sample records the trees' processes and returns those it saw.
func (m *cpuMeter) sample() map[int]procTime {
	now := procTicks(m.pids)
	for p, t := range now {
		m.last[p] = t
	}
	return now
}

// Stop ends the sampling (with one last sample) and returns the CPU seconds the trees used since
// the start. Own is valid once it returned.
func (m *cpuMeter) Stop() float64 {
	close(m.stop)
	<-m.done
	return meterTotal(m.pids, m.base, m.last, m.alive) / 100
}

// meterTotal is the trees' CPU in clock ticks from the start values base, the last value seen
// of every process and the processes alive at the end, reckoned as cpuMeter says.
func meterTotal(roots []int, base, last, alive map[int]procTime) float64 {
	kids := map[int][]int{}
	for p, t := range last {
		kids[t.ppid] = append(kids[t.ppid], p)
	}
	done := map[int]bool{} // guards against a cycle of reused pids
	var count func(p int) float64
	count = func(p int) float64 {
		if done[p] {
			return 0
		}
		done[p] = true
		t, b := last[p], base[p]
		var reaped, seen, running float64
		reaped = t.children - b.children
		for _, c := range kids[p] {
			if c == p {
				continue
			}
			if _, ok := alive[c]; ok {
				running += count(c)
				continue
			}
			seen += count(c)
			if cb, ok := base[c]; ok { // its time before the start is in reaped too
				reaped -= cb.self + cb.children
			}
		}
		return max(t.self-b.self, 0) + max(reaped, seen, 0) + running
	}
	var total float64
	for _, r := range roots {
		total += count(r)
	}
	return total
}

// treeCPU is the CPU seconds of the processes pids and their descendants, now (0 for none): each
// process's own time and its waited-for children's.
func treeCPU(pids []int) float64 {
	if len(pids) == 0 {
		return 0
	}
	var total float64
	for _, t := range procTicks(pids) {
		total += t.self + t.children
	}
	return total / 100
}

// Own is the CPU seconds the sampling took, to take off the bench process's CPU. The zero
// meter (nil) took none.
func (m *cpuMeter) Own() float64 {
	if m == nil {
		return 0
	}
	return m.own
}
