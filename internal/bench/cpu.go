package bench

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

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
// cost the bench process (whose CPU the reports charge to sshapi) about 4 ms a reading on a
// machine shared with other work. Without those files (a kernel without
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

// cpuMeter measures the CPU of the sshd process trees while a run lasts, from two readings of
// every process in the trees: one at the start, one at the end. A process's figure is its own
// time plus that of the children it waited for, and sshd waits for everything it starts (the
// listener for its sessions, a session for its shell, a shell for its commands), so the time of
// every process that ended during the run is in its reaping ancestor's figure in full, however
// short it was and however deep it sat. So the trees' CPU is the growth of the figures of the
// processes alive at the end, less the start figures of those that ended (their whole time,
// including what they had used before the run, reached their parents). Adding what was seen of
// ended processes as well, as this meter once did from samples every 100 ms, counted a long
// command twice when its parent ended soon after it (a session's `tar` or sftp-server: once
// as seen, again in the grandparent's children's time). A process nobody in the trees waited
// for (one that outlived its parent) is missed.
type cpuMeter struct {
	pids []int
	base float64 // the trees' CPU seconds at the start (treeCPU)
	own  float64 // CPU seconds the readings took (the reading thread's)
}

// startCPUMeter takes the start reading of the trees rooted at pids. Each reading runs locked to
// its thread and measures that thread's CPU time: Own, which callers take off the bench
// process's CPU, since reading /proc is the benchmark's doing, not the measured client's.
func startCPUMeter(pids []int) *cpuMeter {
	m := &cpuMeter{pids: pids}
	m.base = m.read()
	return m
}

// read is treeCPU of the trees, read on a locked thread whose CPU it adds to own.
func (m *cpuMeter) read() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	now := treeCPU(m.pids)
	m.own += threadCPU() - t0
	return now
}

// threadCPU is the CPU seconds of the calling thread.
func threadCPU() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// Stop takes the end reading and returns the CPU seconds the trees used since the start. Own
// is valid once it returned.
func (m *cpuMeter) Stop() float64 {
	return max(m.read()-m.base, 0)
}

// treeCPU is the CPU seconds of the processes pids and their descendants, now (0 for none): each
// process's own time plus the children's it waited for. Between two readings it grows by the
// growth of every process alive at the second, less the first figure of every process that
// ended in between, which is exactly the trees' CPU in between when every process that ended
// was waited for by one in the trees.
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

// Own is the CPU seconds the readings took, to take off the bench process's CPU. The zero
// meter (nil) took none.
func (m *cpuMeter) Own() float64 {
	if m == nil {
		return 0
	}
	return m.own
}
