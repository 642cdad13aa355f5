package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Efficiency is what a finished job used of what it was given, from accounting.
type Efficiency struct {
	// CPUSeconds is the CPU time the job's steps used; AllocCPUSeconds is elapsed × CPUs.
	CPUSeconds      float64 `json:"cpu_seconds"`
	AllocCPUSeconds float64 `json:"alloc_cpu_seconds"`
	// CPUEfficiency is CPUSeconds / AllocCPUSeconds (0..1), when the job ran at all.
	CPUEfficiency *float64 `json:"cpu_efficiency,omitempty"`
	// MaxRSSBytes is the largest resident set of any step; RequestedMemoryBytes the job's memory
	// request (per node × nodes, or per CPU × CPUs), when known.
	MaxRSSBytes          int64    `json:"max_rss_bytes"`
	RequestedMemoryBytes int64    `json:"requested_memory_bytes,omitempty"`
	MemoryEfficiency     *float64 `json:"memory_efficiency,omitempty"`
	ElapsedSeconds       int64    `json:"elapsed_seconds"`
}

// sacctFields are the sacct -o fields read, in order; every one exists from 22.05 on.
var sacctFields = []string{"JobID", "JobIDRaw", "JobName", "User", "State", "ExitCode", "Submit", "Start", "End",
	"ElapsedRaw", "TotalCPU", "AllocCPUS", "ReqMem", "MaxRSS", "NNodes", "NodeList", "Partition", "Account", "QOS",
	"WorkDir", "Timelimit"}

// Accounting returns finished (and other) jobs from the accounting database (sacct), one per job
// or array task, with their efficiency: the jobs named by ids, or else those submitted since.
// It needs slurmdbd; a cluster without it answers with an error.
func (s *Slurm) Accounting(ctx context.Context, since time.Time, ids ...string) ([]Job, error) {
	args := []string{"-n", "-P", "--delimiter=" + sep, "-o", strings.Join(sacctFields, ",")}
	if len(ids) > 0 {
		for _, id := range ids {
			if !ValidJobID(id) {
				return nil, fieldErr("job_id", "%q is not a job id", id)
			}
		}
		args = append(args, "-j", strings.Join(ids, ","))
	} else {
		args = append(args, "-S", since.UTC().Format("2006-01-02T15:04:05"), "-E", "now")
	}
	r, err := s.exec(ctx, s.command(nil, "sacct", args...), nil, maxListBytes)
	if err != nil {
		return nil, err
	}
	if r.code != 0 {
		return nil, s.failed(ctx, r, func() error { return fmt.Errorf("sacct exited %d: %s", r.code, firstLine(r.stderr)) })
	}
	return parseSacct(r.stdout)
}

// parseSacct parses sacct -n -P --delimiter=sep -o sacctFields output: job lines ("123",
// "123_4") followed by their steps ("123.batch", "123.0"), whose MaxRSS counts for the job.
func parseSacct(out string) ([]Job, error) {
	var jobs []Job
	idx := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, sep)
		if len(f) != len(sacctFields) {
			return nil, fmt.Errorf("sacct line has %d fields, want %d: %q", len(f), len(sacctFields), line)
		}
		v := map[string]string{}
		for i, name := range sacctFields {
			v[name] = strings.TrimSpace(f[i])
		}
		id := v["JobID"]
		if base, _, isStep := strings.Cut(id, "."); isStep {
			if i, ok := idx[base]; ok {
				if rss := parseSize(v["MaxRSS"], 1024); rss > jobs[i].Efficiency.MaxRSSBytes {
					jobs[i].Efficiency.MaxRSSBytes = rss
				}
			}
			continue
		}
		j := Job{ID: id, rawID: v["JobIDRaw"], Name: v["JobName"], User: v["User"], Partition: none(v["Partition"]),
			Account: none(v["Account"]), QOS: none(v["QOS"]), WorkDir: v["WorkDir"], TimeLimit: v["Timelimit"],
			NodeList: none(v["NodeList"])}
		if jobID, task, ok := strings.Cut(id, "_"); ok {
			j.ArrayJobID, j.ArrayTaskID = jobID, task
		}
		j.setState(v["State"])
		j.SubmitTime, j.StartTime, j.EndTime = slurmTime(v["Submit"]), slurmTime(v["Start"]), slurmTime(v["End"])
		if !j.Finished {
			j.EndTime = nil
		}
		j.Nodes, _ = strconv.Atoi(v["NNodes"])
		j.CPUs, _ = strconv.Atoi(v["AllocCPUS"])
		if j.Finished {
			if code, sig, ok := strings.Cut(v["ExitCode"], ":"); ok {
				c, err1 := strconv.Atoi(code)
				sg, err2 := strconv.Atoi(sig)
				if err1 == nil && err2 == nil {
					j.ExitCode = &c
					if sg != 0 {
						j.Signal = &sg
					}
				}
			}
		}
		e := &Efficiency{CPUSeconds: parseDuration(v["TotalCPU"]), MaxRSSBytes: parseSize(v["MaxRSS"], 1024)}
		e.ElapsedSeconds, _ = strconv.ParseInt(v["ElapsedRaw"], 10, 64)
		e.AllocCPUSeconds = float64(e.ElapsedSeconds * int64(j.CPUs))
		e.RequestedMemoryBytes = requestedMemory(v["ReqMem"], j.Nodes, j.CPUs)
		j.Efficiency = e
		idx[id] = len(jobs)
		jobs = append(jobs, j)
	}
	for i := range jobs {
		e := jobs[i].Efficiency
		if e.AllocCPUSeconds > 0 {
			x := min(e.CPUSeconds/e.AllocCPUSeconds, 1)
			e.CPUEfficiency = &x
		}
		if e.RequestedMemoryBytes > 0 {
			x := float64(e.MaxRSSBytes) / float64(e.RequestedMemoryBytes)
			e.MemoryEfficiency = &x
		}
	}
	return jobs, nil
}

// parseDuration reads sacct's [DD-[HH:]]MM:SS[.mmm] as seconds.
func parseDuration(s string) float64 {
	if s == "" {
		return 0
	}
	days := 0.0
	if d, rest, ok := strings.Cut(s, "-"); ok {
		n, _ := strconv.ParseFloat(d, 64)
		days, s = n, rest
	}
	parts := strings.Split(s, ":")
	total := 0.0
	for _, p := range parts {
		n, _ := strconv.ParseFloat(p, 64)
		total = total*60 + n
	}
	return days*86400 + total
}

// parseSize reads a size with an optional K/M/G/T suffix (Slurm's, powers of 1024); a bare
// number is in units of bare.
func parseSize(s string, bare int64) int64 {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	mult, suffixed := bare, true
	switch s[len(s)-1] {
	case 'K':
		mult = 1 << 10
	case 'M':
		mult = 1 << 20
	case 'G':
		mult = 1 << 30
	case 'T':
		mult = 1 << 40
	default:
		suffixed = false
	}
	if suffixed {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return int64(n * float64(mult))
}

// requestedMemory reads ReqMem: "4000M" (per node in 22.05+; "4000Mn" earlier), "1000Mc" per
// CPU.
func requestedMemory(s string, nodes, cpus int) int64 {
	switch {
	case strings.HasSuffix(s, "c"):
		return parseSize(strings.TrimSuffix(s, "c"), 1<<20) * int64(max(cpus, 1))
	case strings.HasSuffix(s, "n"):
		s = strings.TrimSuffix(s, "n")
	}
	return parseSize(s, 1<<20) * int64(max(nodes, 1))
}

// Lookup returns one job like Get; with accounting on, a job the controller no longer holds is
// read from sacct (Source "accounting"), and a finished job gets its efficiency.
func (s *Slurm) Lookup(ctx context.Context, user, id string) (*Job, error) {
	j, err := s.Get(ctx, user, id)
	if !s.Sched.Accounting {
		return j, err
	}
	if errors.Is(err, ErrNotFound) {
		return s.fromAccounting(ctx, user, id)
	}
	if err != nil || !j.Finished {
		return j, err
	}
	if acc, aerr := s.fromAccounting(ctx, user, id); aerr == nil {
		j.Efficiency = acc.Efficiency
	}
	return j, nil
}

// fromAccounting reads one job or array task from sacct.
func (s *Slurm) fromAccounting(ctx context.Context, user, id string) (*Job, error) {
	recs, err := s.Accounting(ctx, time.Time{}, id)
	if err != nil {
		return nil, err
	}
	for i := range recs {
		if recs[i].ID == id || (len(recs) == 1 && recs[i].rawID == id) {
			j := &recs[i]
			if user != "" && j.User != user {
				return nil, fmt.Errorf("%w: job %s", ErrForbidden, id)
			}
			j.Source = "accounting"
			return j, nil
		}
	}
	return nil, fmt.Errorf("%w: %s (not in accounting either)", ErrNotFound, id)
}
