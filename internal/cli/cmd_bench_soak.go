package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/soak"
)

func newBenchSoakCmd() *cobra.Command {
	var o soak.Options
	var faults, jsonOut, mdOut, plots string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Mixed load against several sshapi instances behind HAProxy on one PostgreSQL while the sshd, instances and database are restarted; fails if anything acknowledged was lost (self-hosted, root)",
		Example: `  sshapi bench soak --duration 2m --rate 8 --instances 2 --fault-every 10s
  sshapi bench soak --duration 10m --rate 10 --json soak.json --markdown soak.md --plots img/`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Rate <= 0 || o.Rate > 200 {
				return errors.New("--rate: want 0 < rate <= 200 requests per second")
			}
			if o.Instances < 1 || o.Instances > 8 {
				return errors.New("--instances: want 1-8")
			}
			if o.Duration < 10*time.Second {
				return errors.New("--duration: want at least 10s")
			}
			o.Faults = []string{}
			if faults != "none" {
				for _, f := range strings.Split(faults, ",") {
					if f = strings.TrimSpace(f); f != "" {
						o.Faults = append(o.Faults, f)
					}
				}
			}
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("own executable (run as the instances): %w", err)
			}
			o.Binary = bin
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, runErr := soak.Run(ctx, o)
			if rep == nil {
				return runErr
			}
			err = writeTables(rep, cmd.OutOrStdout(), jsonOut, mdOut)
			if plots != "" && err == nil {
				var names []string
				if names, err = rep.WritePlots(plots); err == nil {
					for _, n := range names {
						fmt.Fprintln(cmd.ErrOrStderr(), "wrote", n)
					}
				}
			}
			return errors.Join(runErr, err)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.Duration, "duration", 2*time.Minute, "how long the load runs")
	f.Float64Var(&o.Rate, "rate", 8, "requests per second (open loop)")
	f.IntVar(&o.Instances, "instances", 2, "sshapi processes sharing the database behind the balancer")
	f.DurationVar(&o.FaultEvery, "fault-every", 15*time.Second, "quiet time before each fault window")
	f.StringVar(&faults, "faults", strings.Join(soak.DefaultFaults, ","), "faults in order, cycled (or none); the default is all of them: "+strings.Join(soak.DefaultFaults, ", "))
	f.DurationVar(&o.StallFor, "stall-for", 15*time.Second, "how long "+soak.FaultStall+" holds the path to the sshd")
	f.StringVar(&jsonOut, "json", "", "write the report to this JSON file")
	f.StringVar(&mdOut, "markdown", "", "write the Markdown tables to this file")
	f.StringVar(&plots, "plots", "", "write PNG plots (latency over time, instance memory) into this directory")
	f.StringVar(&o.LogDir, "logs", "", "copy the instances', HAProxy's and sshd's logs into this directory at the end")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}
