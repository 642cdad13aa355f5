package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/bench/study"
)

func newBenchTusCmd() *cobra.Command {
	var o study.TusOptions
	var size, chunks, jsonOut, mdOut string
	var wan, quiet bool
	cmd := &cobra.Command{
		Use:   "tus",
		Short: "Upload one file through the resumable (tus) endpoint per PATCH size beside a plain curl PUT of the same file (self-hosted sshd and sshapi; loopback and 1 Gbit/s × 50 ms)",
		Example: `  sshapi bench tus --size 256MiB --chunks 8MiB,64MiB,whole --rounds 3
  sshapi bench tus --size 64MiB --wan=false --json tus.json --markdown tus.md`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Size, err = bench.ParseSize(size); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			for _, c := range strings.Split(chunks, ",") {
				if c = strings.TrimSpace(c); c == "whole" {
					o.Chunks = append(o.Chunks, 0)
					continue
				}
				n, err := bench.ParseSize(c)
				if err != nil || n <= 0 {
					return fmt.Errorf("--chunks %q: want sizes (8MiB) or whole", c)
				}
				o.Chunks = append(o.Chunks, n)
			}
			if !wan {
				o.Paths = []study.TransferPath{{}}
			}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := study.RunTus(ctx, o)
			if rep == nil || len(rep.Runs) == 0 {
				return err
			}
			return errors.Join(err, writeTables(rep, cmd.OutOrStdout(), jsonOut, mdOut))
		},
	}
	f := cmd.Flags()
	f.StringVar(&size, "size", "256MiB", "size of the file uploaded")
	f.StringVar(&chunks, "chunks", "8MiB,64MiB,whole", "tus PATCH sizes, one series each (whole: the file in one PATCH)")
	f.IntVar(&o.Rounds, "rounds", 3, "rounds of every target per path, interleaved")
	f.BoolVar(&wan, "wan", true, "also measure with sshapi reaching the sshd through a 1 Gbit/s × 50 ms wanem proxy (--wan=false: loopback only)")
	f.StringVar(&jsonOut, "json", "", "write the runs and medians to this JSON file")
	f.StringVar(&mdOut, "markdown", "", "write the Markdown table to this file")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}
