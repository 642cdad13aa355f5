package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/bench/study"
)

// maxListEntries is the most entries one listing page holds (http.list_max_window's default).
const maxListEntries = 100_000

func newBenchListingCmd() *cobra.Command {
	var o study.ListingOptions
	var b benchOptions
	var dir, concurrency, jsonOut, mdOut string
	cmd := &cobra.Command{
		Use:   "listing",
		Short: "List a large directory through the API (full metadata JSON; default and SFTP-only) beside find -printf and ls -la over one multiplexed OpenSSH connection, one at a time and 50 at once (self-hosted unless --url)",
		Example: `  sshapi bench listing --entries 10000 --concurrency 1,50
  sshapi bench listing --url $SSHAPI_URL --system hpc --dir /scratch/me/big --ssh me@hpc:22 --ssh-key ~/.ssh/id_ed25519 \
      --ssh-host-key "$(ssh-keyscan -t ed25519 hpc | cut -d' ' -f2-)"`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Concurrency, err = bench.ParseStreams(concurrency); err != nil {
				return fmt.Errorf("--concurrency: %w", err)
			}
			if len(o.Concurrency) == 0 || slices.Contains(o.Concurrency, 0) {
				return fmt.Errorf("--concurrency %q: want counts 1-64", concurrency)
			}
			if o.Entries < 1 || o.Entries > maxListEntries {
				return fmt.Errorf("--entries: want 1-%d", maxListEntries)
			}
			if !b.quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var rep *bench.ListingReport
			if b.url != "" {
				rep, err = remoteListing(ctx, &b, dir, o)
			} else {
				rep, err = study.RunListing(ctx, o)
			}
			if rep == nil || len(rep.Runs) == 0 {
				return err
			}
			return errors.Join(err, writeTables(rep, cmd.OutOrStdout(), jsonOut, mdOut))
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Entries, "entries", 10_000, "entries of the directory the self-hosted bench creates")
	f.StringVar(&concurrency, "concurrency", "1,50", "listings in flight at once, one run per value")
	f.IntVar(&o.Listings, "listings", 40, "listings per run (at concurrency c at least 4c)")
	f.StringVar(&b.url, "url", "", "measure this running sshapi instead of a self-hosted one")
	f.StringVar(&b.token, "token", "", "bearer token with --url (default $SSHAPI_TOKEN)")
	f.StringVar(&b.system, "system", "", "system id with --url")
	f.StringVar(&dir, "dir", "", "with --url: the absolute path of an existing directory on --system to list")
	f.StringVar(&b.ssh, "ssh", "", "with --url: the sshd the system points at, for the OpenSSH peers: user@host[:port]")
	f.StringVar(&b.sshKey, "ssh-key", "", "private key file for the OpenSSH peers")
	f.StringVar(&b.sshHostKey, "ssh-host-key", "", "the sshd's host key for the OpenSSH peers, 'ssh-ed25519 AAAA...'")
	f.StringVar(&jsonOut, "json", "", "write the runs to this JSON file")
	f.StringVar(&mdOut, "markdown", "", "write the Markdown tables to this file")
	f.BoolVarP(&b.quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}

// remoteListing lists dir on a running sshapi and, with --ssh, over one multiplexed OpenSSH
// connection to the same sshd.
func remoteListing(ctx context.Context, b *benchOptions, dir string, o study.ListingOptions) (*bench.ListingReport, error) {
	if !strings.HasPrefix(dir, "/") {
		return nil, errors.New("--url needs --dir, the absolute path of an existing directory")
	}
	if b.ssh != "" {
		b.compare = bench.PeerOpenSSHMux
	}
	t, err := b.targets()
	if err != nil {
		return nil, err
	}
	if t.Endpoint.KeyFile != "" {
		defer os.RemoveAll(dirOf(t.Endpoint.KeyFile))
	}
	_, total, err := t.API.CountEntries(ctx, t.System, dir, maxListEntries)
	if err != nil {
		return nil, err
	}
	limit := max(1, min(total, maxListEntries))
	targets := []bench.ListingTarget{{Name: bench.BaselineTarget, Op: t.API.APIListOp(t.System, dir, limit)}}
	if b.ssh != "" {
		peers, stopMux, err := bench.MuxListingTargets(ctx, t.Endpoint, dir)
		if err != nil {
			return nil, err
		}
		defer stopMux()
		targets = append(targets, peers...)
	}
	rep := &bench.ListingReport{Meta: study.Machine(ctx)}
	rep.Meta.Started, rep.Meta.Runs = time.Now(), 1
	lb := &bench.ListingBench{Targets: targets, Entries: total, Concurrency: o.Concurrency, Listings: o.Listings, Progress: o.Progress, Report: rep}
	err = lb.Run(ctx)
	rep.Meta.Notes = study.ListingNotes(dir, lb.Listings, lb.Rounds, "")
	return rep, err
}
