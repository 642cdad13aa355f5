package jobs

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// sep ends every squeue -O field: the ASCII unit separator, which job names and paths do not
// hold (Submit refuses control characters).
const sep = "\x1f"

// squeueFields are the squeue -O fields read, in order; every one exists from 22.05 on.
var squeueFields = []string{"JobArrayID", "JobID", "ArrayJobID", "ArrayTaskID", "Name", "UserName", "State", "Reason",
	"Partition", "Account", "QOS", "SubmitTime", "StartTime", "EndTime", "TimeLimit", "NumNodes", "NumCPUs",
	"NodeList", "WorkDir", "STDOUT", "STDERR", "Dependency"}

// squeueFormat is the -O argument: each field without padding, followed by sep.
func squeueFormat() string {
	var b strings.Builder
	for i, f := range squeueFields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f + ":" + sep)
	}
	return b.String()
}

// parseSqueue parses squeue -h -r -O squeueFormat() output. A "CLUSTER: name" header (with
// --clusters) is skipped; a line with the wrong number of fields is an error.
func parseSqueue(out string) ([]Job, error) {
	var jobs []Job
	for _, line := range strings.Split(out, "\n") {
		if line == "" || strings.HasPrefix(line, "CLUSTER: ") {
			continue
		}
		f := strings.Split(line, sep)
		if len(f) != len(squeueFields)+1 || f[len(f)-1] != "" {
			return nil, fmt.Errorf("squeue line has %d fields, want %d: %q", len(f)-1, len(squeueFields), line)
		}
		v := map[string]string{}
		for i, name := range squeueFields {
			v[name] = strings.TrimSpace(f[i])
		}
		j := Job{ID: v["JobArrayID"], Name: v["Name"], User: v["UserName"], Reason: none(v["Reason"]),
			Partition: none(v["Partition"]), Account: none(v["Account"]), QOS: none(v["QOS"]),
			TimeLimit: v["TimeLimit"], NodeList: none(v["NodeList"]), WorkDir: v["WorkDir"],
			Dependency: none(v["Dependency"])}
		if task := v["ArrayTaskID"]; task != "" && task != "N/A" {
			j.ArrayJobID, j.ArrayTaskID = v["ArrayJobID"], task
		}
		j.rawID = v["JobID"]
		if j.ID == "" {
			j.ID = j.rawID
		}
		j.setState(v["State"])
		j.SubmitTime, j.StartTime, j.EndTime = slurmTime(v["SubmitTime"]), slurmTime(v["StartTime"]), slurmTime(v["EndTime"])
		if !j.Finished {
			j.EndTime = nil // squeue shows the time limit's end for running jobs
		}
		j.Nodes, _ = strconv.Atoi(v["NumNodes"])
		j.CPUs, _ = strconv.Atoi(v["NumCPUs"])
		j.Stdout, j.Stderr = j.expand(v["STDOUT"]), j.expand(v["STDERR"])
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// keyRE finds candidate starts of Key=value pairs of `scontrol show -o job`: a space followed
// by a capitalised key.
var keyRE = regexp.MustCompile(` [A-Z][A-Za-z0-9/:_-]*=`)

// freeText are the keys whose values are free text (a job name, paths): inside them only a
// known key ends the value, so a name such as "run Name=x" stays whole. Elsewhere any
// capitalised Key= starts a new pair, so keys added by later releases are read too.
var freeText = map[string]bool{"JobName": true, "WorkDir": true, "StdErr": true, "StdIn": true, "StdOut": true,
	"Command": true, "Comment": true, "AdminComment": true, "SystemComment": true, "Extra": true}

// knownKeys are scontrol's job keys (22.05 to 25.x) that can follow a free-text value.
var knownKeys = map[string]bool{"UserId": true, "GroupId": true, "MCS_label": true, "Priority": true,
	"StdErr": true, "StdIn": true, "StdOut": true, "Power": true, "WorkDir": true, "Command": true,
	"AdminComment": true, "Comment": true, "SystemComment": true, "Extra": true, "TresPerTask": true,
	"TresPerNode": true, "TresPerJob": true, "MailUser": true, "MailType": true, "NtasksPerTRES": true,
	"CpusPerTres": true, "MemPerTres": true, "TresBind": true, "TresFreq": true, "Container": true,
	"ContainerID": true, "ResvPorts": true, "Licenses": true, "Network": true, "SegmentSize": true}

// splitPairs splits one `scontrol show -o job` line into its pairs.
func splitPairs(line string) map[string]string {
	v := map[string]string{}
	start := 0
	put := func(end int) {
		if k, val, ok := strings.Cut(line[start:end], "="); ok {
			v[k] = val
		}
	}
	for _, m := range keyRE.FindAllStringIndex(line, -1) {
		cand := line[m[0]+1 : m[1]-1]
		cur, _, _ := strings.Cut(line[start:m[0]], "=")
		if freeText[cur] && !knownKeys[cand] {
			continue
		}
		put(m[0])
		start = m[0] + 1
	}
	put(len(line))
	return v
}

// parseScontrol parses `scontrol show -o job` output: one record per line.
func parseScontrol(out string) ([]Job, error) {
	var jobs []Job
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, " ")
		if !strings.HasPrefix(line, "JobId=") {
			continue
		}
		v := splitPairs(line)
		j := Job{ID: v["JobId"], Name: v["JobName"], Reason: none(v["Reason"]), Partition: none(v["Partition"]),
			Account: none(v["Account"]), QOS: none(v["QOS"]), TimeLimit: v["TimeLimit"], NodeList: none(v["NodeList"]),
			WorkDir: v["WorkDir"], Dependency: none(v["Dependency"])}
		j.User, _, _ = strings.Cut(v["UserId"], "(")
		j.rawID = v["JobId"]
		if task := v["ArrayTaskId"]; task != "" {
			j.ArrayJobID, j.ArrayTaskID = v["ArrayJobId"], task
			j.ID = j.ArrayJobID + "_" + task
			if strings.ContainsAny(task, "-,%") {
				j.ID = j.ArrayJobID + "_[" + task + "]"
			}
		}
		j.setState(v["JobState"])
		j.SubmitTime, j.StartTime, j.EndTime = slurmTime(v["SubmitTime"]), slurmTime(v["StartTime"]), slurmTime(v["EndTime"])
		if !j.Finished {
			j.EndTime = nil
		}
		j.Nodes, _ = strconv.Atoi(v["NumNodes"])
		j.CPUs, _ = strconv.Atoi(v["NumCPUs"])
		if j.Finished {
			if code, sig, ok := strings.Cut(v["ExitCode"], ":"); ok {
				c, err1 := strconv.Atoi(code)
				s, err2 := strconv.Atoi(sig)
				if err1 == nil && err2 == nil {
					j.ExitCode = &c
					if s != 0 {
						j.Signal = &s
					}
				}
			}
		}
		// scontrol expands the patterns of a job and of one array task; in a pending array's
		// whole record it writes NO_VAL (4294967294) for %a: each task's path differs there, so
		// it is shown as the pattern. Then expand what scontrol left.
		j.Stdout, j.Stderr = j.expand(j.taskPattern(v["StdOut"])), j.expand(j.taskPattern(v["StdErr"]))
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// setState fills State, SlurmState, Finished and Held from a Slurm state (first word only).
func (j *Job) setState(s string) {
	s, _, _ = strings.Cut(strings.TrimSpace(s), " ")
	j.SlurmState = s
	j.State, j.Finished = normalise(s)
	j.Held = j.State == StatePending && (j.Reason == "JobHeldUser" || j.Reason == "JobHeldAdmin")
}

// noVal is Slurm's NO_VAL, which scontrol prints for %a in a pending array's whole record.
const noVal = "4294967294"

// taskPattern puts %a back where scontrol wrote NO_VAL for it, in the record of a whole array
// (a task range), whose tasks each have their own path.
func (j *Job) taskPattern(p string) string {
	if !strings.ContainsAny(j.ArrayTaskID, "-,%") {
		return p
	}
	return strings.ReplaceAll(strings.ReplaceAll(p, "%", "%%"), noVal, "%%a") // expand makes %% a %
}

// expand resolves sbatch's filename patterns (%j %A %a %x %u %N %%) in an output path, relative
// to the working directory. Patterns that need the running node (%n %t %s) are left.
func (j *Job) expand(p string) string {
	if p == "" || p == "(null)" {
		return ""
	}
	if strings.Contains(p, "%") {
		jobID, arrayID, task := j.ID, j.ID, "4294967294"
		if j.ArrayTaskID != "" {
			jobID, arrayID, task = j.ArrayJobID, j.ArrayJobID, j.ArrayTaskID
		}
		if j.rawID != "" {
			jobID = j.rawID
		}
		var b strings.Builder
		for i := 0; i < len(p); i++ {
			c := p[i]
			if c != '%' || i+1 == len(p) {
				b.WriteByte(c)
				continue
			}
			// an optional zero-padding width: %4a
			k := i + 1
			for k < len(p) && p[k] >= '0' && p[k] <= '9' {
				k++
			}
			if k == len(p) {
				b.WriteString(p[i:])
				break
			}
			width, _ := strconv.Atoi(p[i+1 : k])
			pad := func(s string) string {
				for len(s) < width {
					s = "0" + s
				}
				return s
			}
			switch p[k] {
			case '%':
				b.WriteByte('%')
			case 'j':
				b.WriteString(pad(jobID))
			case 'A':
				b.WriteString(pad(arrayID))
			case 'a':
				b.WriteString(pad(task))
			case 'x':
				b.WriteString(j.Name)
			case 'u':
				b.WriteString(j.User)
			case 'N':
				first, _, _ := strings.Cut(j.NodeList, ",")
				b.WriteString(first)
			default:
				b.WriteString(p[i : k+1])
			}
			i = k
		}
		p = b.String()
	}
	if !strings.HasPrefix(p, "/") && j.WorkDir != "" {
		p = path.Join(j.WorkDir, p)
	}
	return p
}

// none maps Slurm's empty markers to "".
func none(s string) string {
	switch s {
	case "(null)", "N/A", "None", "n/a":
		return ""
	}
	return s
}

// slurmTime parses Slurm's ISO time (commands run with TZ=UTC); "N/A", "Unknown", "None" → nil.
func slurmTime(s string) *time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.UTC)
	if err != nil {
		return nil
	}
	return &t
}
