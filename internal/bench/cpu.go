package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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
// per process, its own time plus its waited-for children's. A process that ended and was waited
// for by its parent in the tree (sshd waits for its sessions, a session for its commands) is in
// that parent's children's time in full, so what was seen of it is taken off again, up to what
// the parent's children's time grew by (a child nobody waited for is not in it). So processes
// shorter than a sample interval count through their parents; only the unseen part of a process
// nobody in the tree waited for is missed.
type cpuMeter struct {
	pids []int
	stop chan struct{}
	done chan struct{}
	base map[int]procTime
	last map[int]procTime
}

func startCPUMeter(pids []int) *cpuMeter {
	m := &cpuMeter{pids: pids, stop: make(chan struct{}), done: make(chan struct{}), base: procTicks(pids), last: map[int]procTime{}}
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// sample records the trees' processes and returns those it saw.
func (m *cpuMeter) sample() map[int]procTime {
	now := procTicks(m.pids)
	for p, t := range now {
		m.last[p] = t
	}
	return now
}

// Stop ends the sampling and returns the CPU seconds used since the start.
func (m *cpuMeter) Stop() float64 {
	close(m.stop)
	<-m.done
	alive := m.sample()
	var total float64
	ended := map[int]float64{} // per parent: the last seen time of its children that ended
	for p, t := range m.last {
		b := m.base[p]
		total += t.self + t.children - b.self - b.children
		if _, ok := alive[p]; !ok {
			if _, inTree := m.last[t.ppid]; inTree {
				ended[t.ppid] += t.self + t.children
			}
		}
	}
	for q, seen := range ended {
		grown := m.last[q].children - m.base[q].children
		total -= min(seen, max(grown, 0))
	}
	return max(total, 0) / 100
}
