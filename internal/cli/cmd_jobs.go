package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/client"
)

// newJobsCmd is `sshapi jobs submit|ls|show|cancel|tail`: batch jobs on a system's scheduler.
func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "Submit, list, show, cancel and tail batch jobs (Slurm) on a system"}
	cmd.AddCommand(newJobsSubmitCmd(), newJobsLsCmd(), newJobsShowCmd(), newJobsCancelCmd(), newJobsTailCmd())
	return cmd
}

func newJobsSubmitCmd() *cobra.Command {
	var (
		spec      client.JobSpec
		remote    bool
		wait      bool
		extraArgs []string
		env       map[string]string
	)
	cmd := &cobra.Command{
		Use:   "submit SYSTEM SCRIPT|- [flags]",
		Short: "Submit a batch script (a local file, - for stdin, or --remote for a path on the system); prints the job id",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if remote {
				spec.ScriptPath = args[1]
			} else {
				var b []byte
				var err error
				if args[1] == "-" {
					b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
				} else {
					b, err = os.ReadFile(args[1])
				}
				if err != nil {
					return err
				}
				spec.Script = string(b)
			}
			spec.ExtraArgs, spec.Env = extraArgs, env
			c, err := apiClient()
			if err != nil {
				return err
			}
			j, err := c.SubmitJob(cmd.Context(), args[0], spec)
			if err != nil {
				return err
			}
			if !wait {
				fmt.Fprintln(cmd.OutOrStdout(), j.ID)
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "job %s\n", j.ID)
			j, err = c.WaitJob(cmd.Context(), args[0], j.ID, "finished")
			if err != nil {
				return err
			}
			return printJobEnd(cmd.OutOrStdout(), j)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&remote, "remote", false, "SCRIPT is a path on the system")
	f.BoolVar(&wait, "wait", false, "wait until the job has finished; exit non-zero unless it completed")
	f.StringVarP(&spec.Name, "job-name", "J", "", "job name")
	f.StringVarP(&spec.Partition, "partition", "p", "", "partition")
	f.StringVarP(&spec.Account, "account", "A", "", "account")
	f.StringVarP(&spec.QOS, "qos", "q", "", "QOS")
	f.StringVarP(&spec.TimeLimit, "time", "t", "", "time limit (minutes, HH:MM:SS, D-HH:MM:SS)")
	f.StringVarP(&spec.Nodes, "nodes", "N", "", "node count or min-max")
	f.IntVarP(&spec.NTasks, "ntasks", "n", 0, "tasks")
	f.IntVarP(&spec.CPUsPerTask, "cpus-per-task", "c", 0, "CPUs per task")
	f.StringVar(&spec.Memory, "mem", "", "memory per node (e.g. 4G)")
	f.StringVar(&spec.GPUs, "gpus", "", "GPUs (count or type:count)")
	f.StringVarP(&spec.Array, "array", "a", "", "array indices (1-10, 0-99%10)")
	f.StringVarP(&spec.Dependency, "dependency", "d", "", "dependency (afterok:123)")
	f.StringVarP(&spec.WorkingDir, "chdir", "D", "", "working directory on the system")
	f.StringVarP(&spec.Output, "output", "o", "", "stdout path pattern")
	f.StringVarP(&spec.Error, "error", "e", "", "stderr path pattern")
	f.StringToStringVar(&env, "env", nil, "variables for the job (NAME=VALUE,...)")
	f.StringArrayVar(&extraArgs, "sbatch-arg", nil, "an allowed sbatch option (--name or --name=value); repeatable")
	return cmd
}

// printJobEnd prints a finished job's outcome and fails unless it completed.
func printJobEnd(w io.Writer, j client.Job) error {
	code := ""
	if j.ExitCode != nil {
		code = fmt.Sprintf(" exit %d", *j.ExitCode)
	}
	if j.Signal != nil {
		code += fmt.Sprintf(" signal %d", *j.Signal)
	}
	fmt.Fprintf(w, "%s %s%s\n", j.ID, j.State, code)
	if j.State != "completed" {
		return fmt.Errorf("job %s %s", j.ID, j.State)
	}
	return nil
}

func newJobsLsCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "ls SYSTEM",
		Short: "List your jobs on a system (pending, running, recently finished)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			js, err := c.Jobs(cmd.Context(), args[0], state)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tNAME\tSTATE\tREASON\tPARTITION\tNODES\tSUBMITTED")
			for _, j := range js {
				sub := ""
				if j.SubmitTime != nil {
					sub = j.SubmitTime.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Name, j.State, j.Reason, j.Partition, j.NodeList, sub)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only these states (comma-separated: pending, running, completed, failed, ...)")
	return cmd
}

func newJobsShowCmd() *cobra.Command {
	var script bool
	cmd := &cobra.Command{
		Use:   "show SYSTEM JOB_ID",
		Short: "Show a job or array task (123_4) as JSON",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			j, err := c.Job(cmd.Context(), args[0], args[1], script)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(j)
		},
	}
	cmd.Flags().BoolVar(&script, "script", false, "include the batch script")
	return cmd
}

func newJobsCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel SYSTEM JOB_ID",
		Short: "Cancel one of your jobs",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			return c.CancelJob(cmd.Context(), args[0], args[1])
		},
	}
}

func newJobsTailCmd() *cobra.Command {
	var (
		follow, stderr bool
		bytes          int64
	)
	cmd := &cobra.Command{
		Use:   "tail SYSTEM JOB_ID [-f]",
		Short: "Print the end of a job's output, or follow it (-f) until the job ends",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			stream := "stdout"
			if stderr {
				stream = "stderr"
			}
			if !follow {
				return c.JobOutput(cmd.Context(), args[0], args[1], stream, bytes, cmd.OutOrStdout())
			}
			j, err := c.FollowJobOutput(cmd.Context(), args[0], args[1], stream, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return printJobEnd(cmd.ErrOrStderr(), j)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the output as the job writes it, until it ends")
	cmd.Flags().BoolVar(&stderr, "stderr", false, "the job's standard error instead of its output")
	cmd.Flags().Int64VarP(&bytes, "bytes", "c", 64<<10, "how many bytes of the end to print")
	return cmd
}
