package jobs

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Spec is a job to submit. Exactly one of Script and ScriptPath is set.
type Spec struct {
	Script      string            `json:"script,omitempty"`
	ScriptPath  string            `json:"script_path,omitempty"`
	WorkingDir  string            `json:"working_dir,omitempty"`
	Name        string            `json:"name,omitempty"`
	Partition   string            `json:"partition,omitempty"`
	Account     string            `json:"account,omitempty"`
	QOS         string            `json:"qos,omitempty"`
	TimeLimit   string            `json:"time_limit,omitempty"`
	Nodes       string            `json:"nodes,omitempty"`
	NTasks      int               `json:"ntasks,omitempty"`
	CPUsPerTask int               `json:"cpus_per_task,omitempty"`
	Memory      string            `json:"memory,omitempty"`
	GPUs        string            `json:"gpus,omitempty"`
	Array       string            `json:"array,omitempty"`
	Dependency  string            `json:"dependency,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Output      string            `json:"output,omitempty"`
	Error       string            `json:"error,omitempty"`
	ExtraArgs   []string          `json:"extra_args,omitempty"`
}

// AllowedExtraArgs are the sbatch options extra_args may carry ("--name" for a flag,
// "--name=value" for an option). Options that change who runs what (--uid, --wrap, --export,
// --get-user-env, --chdir, --output ...) are fields or refused.
var AllowedExtraArgs = map[string]bool{ // name → takes a value
	"--begin": true, "--comment": true, "--constraint": true, "--contiguous": false, "--deadline": true,
	"--distribution": true, "--exclude": true, "--exclusive": false, "--gpus-per-node": true,
	"--gpus-per-task": true, "--gres": true, "--hint": true, "--kill-on-invalid-dep": true, "--licenses": true,
	"--mail-type": true, "--mail-user": true, "--mem-per-cpu": true, "--mem-per-gpu": true, "--nice": true,
	"--nodelist": true, "--no-requeue": false, "--ntasks-per-node": true, "--open-mode": true,
	"--overcommit": false, "--requeue": false, "--reservation": true, "--signal": true, "--spread-job": false,
	"--switches": true, "--time-min": true, "--tmp": true, "--wckey": true,
}

var (
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	timeLimitRE = regexp.MustCompile(`^(?:[0-9]+|[0-9]+:[0-9]{1,2}|[0-9]+:[0-9]{1,2}:[0-9]{1,2}|[0-9]+-[0-9]{1,2}|[0-9]+-[0-9]{1,2}:[0-9]{1,2}|[0-9]+-[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}|UNLIMITED|unlimited|INFINITE|infinite)$`)
	memoryRE    = regexp.MustCompile(`^[0-9]+[KMGT]?$`)
	nodesRE     = regexp.MustCompile(`^[1-9][0-9]{0,5}(-[1-9][0-9]{0,5})?$`)
	arrayRE     = regexp.MustCompile(`^[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*(%[0-9]+)?$`)
	depRE       = regexp.MustCompile(`^(?:(after|afterany|afterok|afternotok|aftercorr|afterburstbuffer|singleton)(:[0-9_+:]+)?)([,?](after|afterany|afterok|afternotok|aftercorr|afterburstbuffer|singleton)(:[0-9_+:]+)?)*$`)
	gpusRE      = regexp.MustCompile(`^([A-Za-z0-9_.-]+:)?[0-9]{1,4}$`)
	wordRE      = regexp.MustCompile(`^[A-Za-z0-9_.+-]{1,128}$`)
)

// text refuses control characters (and so the squeue field separator) and over-long values.
func text(field, v string, maxLen int) error {
	if len(v) > maxLen {
		return fieldErr(field, "must be at most %d bytes", maxLen)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return fieldErr(field, "must not contain control characters")
		}
	}
	return nil
}

// Validate checks every field.
func (s *Spec) Validate() error {
	switch {
	case s.Script == "" && s.ScriptPath == "":
		return fieldErr("script", "script or script_path is required")
	case s.Script != "" && s.ScriptPath != "":
		return fieldErr("script_path", "give script or script_path, not both")
	case len(s.Script) > MaxScriptBytes:
		return fieldErr("script", "is %d bytes; at most %d", len(s.Script), MaxScriptBytes)
	case s.Script != "" && !strings.HasPrefix(s.Script, "#!"):
		return fieldErr("script", "must start with an interpreter line (#!/bin/sh)")
	case strings.ContainsRune(s.Script, 0):
		return fieldErr("script", "must not contain NUL bytes")
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"script_path", s.ScriptPath, 4096}, {"working_dir", s.WorkingDir, 4096}, {"name", s.Name, 200},
		{"output", s.Output, 4096}, {"error", s.Error, 4096}} {
		if err := text(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name, v string
		re      *regexp.Regexp
		what    string
	}{{"partition", s.Partition, wordRE, "a partition name"}, {"account", s.Account, wordRE, "an account name"},
		{"qos", s.QOS, wordRE, "a QOS name"}, {"time_limit", s.TimeLimit, timeLimitRE, "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"},
		{"nodes", s.Nodes, nodesRE, "a node count or min-max"}, {"memory", s.Memory, memoryRE, "a size such as 4G or 500M"},
		{"gpus", s.GPUs, gpusRE, "a count or type:count"}, {"array", s.Array, arrayRE, "an index list such as 1-10, 1,3,5 or 0-99%10"},
		{"dependency", s.Dependency, depRE, "afterok:123[:124],... or singleton"}} {
		if f.v != "" && !f.re.MatchString(f.v) {
			return fieldErr(f.name, "must be %s", f.what)
		}
	}
	if s.NTasks < 0 || s.NTasks > 1_000_000 {
		return fieldErr("ntasks", "must be between 1 and 1000000")
	}
	if s.CPUsPerTask < 0 || s.CPUsPerTask > 100_000 {
		return fieldErr("cpus_per_task", "must be between 1 and 100000")
	}
	if len(s.Env) > 256 {
		return fieldErr("env", "at most 256 variables")
	}
	for k, v := range s.Env {
		if !envNameRE.MatchString(k) {
			return fieldErr("env", "%q is not a variable name", k)
		}
		if strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "SBATCH_") || strings.HasPrefix(k, "LD_") || k == "TZ" || k == "LC_ALL" {
			return fieldErr("env", "%s may not be set (it would change how sbatch runs)", k)
		}
		if strings.ContainsRune(v, 0) || len(v) > 32<<10 {
			return fieldErr("env", "%s's value must be at most 32 KiB without NUL bytes", k)
		}
	}
	if len(s.ExtraArgs) > 64 {
		return fieldErr("extra_args", "at most 64 options")
	}
	for i, a := range s.ExtraArgs {
		name, val, hasVal := strings.Cut(a, "=")
		takes, ok := AllowedExtraArgs[name]
		if !ok {
			return fieldErr("extra_args", "entry %d (%q) is not an allowed sbatch option; allowed: %s", i, name, strings.Join(allowedNames(), " "))
		}
		if takes != hasVal {
			if takes {
				return fieldErr("extra_args", "entry %d: %s needs a value (%s=VALUE)", i, name, name)
			}
			return fieldErr("extra_args", "entry %d: %s takes no value", i, name)
		}
		if err := text("extra_args", val, 1024); err != nil {
			return err
		}
	}
	return nil
}

func allowedNames() []string {
	out := make([]string, 0, len(AllowedExtraArgs))
	for k := range AllowedExtraArgs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// args returns sbatch's arguments for the spec (after Validate).
func (s *Spec) args() ([]string, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	a := []string{"--parsable"}
	add := func(opt, v string) {
		if v != "" {
			a = append(a, opt+"="+v)
		}
	}
	add("--chdir", s.WorkingDir)
	add("--job-name", s.Name)
	add("--partition", s.Partition)
	add("--account", s.Account)
	add("--qos", s.QOS)
	add("--time", s.TimeLimit)
	add("--nodes", s.Nodes)
	if s.NTasks > 0 {
		add("--ntasks", strconv.Itoa(s.NTasks))
	}
	if s.CPUsPerTask > 0 {
		add("--cpus-per-task", strconv.Itoa(s.CPUsPerTask))
	}
	add("--mem", s.Memory)
	add("--gpus", s.GPUs)
	add("--array", s.Array)
	add("--dependency", s.Dependency)
	add("--output", s.Output)
	add("--error", s.Error)
	a = append(a, s.ExtraArgs...)
	if s.ScriptPath != "" {
		// "--" is not understood by every sbatch; a path starting with "-" is made relative.
		p := s.ScriptPath
		if strings.HasPrefix(p, "-") {
			p = "./" + p
		}
		a = append(a, p)
	}
	return a, nil
}
