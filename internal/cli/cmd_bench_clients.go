package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/bench/study"
)

func newBenchClientsCmd() *cobra.Command {
	var o study.ClientsOptions
	var cases, peers, jsonOut, mdOut string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "clients",
		Short: "Many clients at once, each sending its next small request when its last is answered (checksum of an 8-byte file, uptime, listing of a 10-entry directory), through sshapi beside pooled peers on the same stock sshd (self-hosted, root)",
		Example: `  sshapi bench clients --clients 50 --duration 10s --cases checksum,uptime,ls --peers asyncssh
  sshapi bench clients --cases ls --peers none --json clients.json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all := []string{bench.CaseChecksum, bench.CaseUptime, bench.CaseLs}
			for _, c := range strings.Split(cases, ",") {
				if c = strings.TrimSpace(c); !slices.Contains(all, c) {
					return fmt.Errorf("--cases %q: want a list of %s", c, strings.Join(all, ","))
				}
				o.Cases = append(o.Cases, c)
			}
			var err error
			if o.Peers, err = bench.ParsePeers(peers); err != nil {
				return fmt.Errorf("--peers: %w", err)
			}
			if o.Clients < 1 {
				return fmt.Errorf("--clients %d: want at least 1", o.Clients)
			}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := study.RunClients(ctx, o)
			if rep == nil || len(rep.Runs) == 0 {
				return err
			}
			return errors.Join(err, writeTables(rep, cmd.OutOrStdout(), jsonOut, mdOut))
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Clients, "clients", 50, "clients sending at once")
	f.DurationVar(&o.Duration, "duration", 0, "length of each run (default 10s)")
	f.StringVar(&cases, "cases", "checksum,uptime,ls", "cases to run: checksum, uptime, ls")
	f.StringVar(&peers, "peers", bench.PeerAsyncSSH, "pooled peers beside sshapi: none or a list of "+strings.Join(bench.AllPeers, ","))
	f.StringVar(&o.Python, "python", "bench/.venv/bin/python", "Python with the peers' requirements (make bench-deps)")
	f.StringVar(&o.PeersDir, "peers-dir", "bench/peers", "directory of the Python peers")
	f.StringVar(&jsonOut, "json", "", "write the runs to this JSON file")
	f.StringVar(&mdOut, "markdown", "", "write the Markdown tables to this file")
	f.StringVar(&o.Profiles, "profiles", "", "directory that receives a CPU profile of each sshapi run (clients-CASE.pprof)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}
