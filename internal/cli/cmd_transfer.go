package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/client"
)

func newTransferCmd() *cobra.Command {
	var (
		recursive, wait bool
		sync            string
		progress        progressOptions
	)
	cmd := &cobra.Command{
		Use:               "transfer SYSTEM:SRC SYSTEM:DST [-r] [--wait]",
		Short:             "Copy between two systems as a durable server-side job; prints its id (or follows it with --wait)",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeRemote,
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := mustRemote(args[0])
			if err != nil {
				return err
			}
			dst, err := mustRemote(args[1])
			if err != nil {
				return err
			}
			c, err := apiClient()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			t, err := c.SubmitTransfer(ctx, client.TransferRequest{
				Source:      client.Endpoint{System: src.system, Path: client.BodyPath(src.path)},
				Destination: client.Endpoint{System: dst.system, Path: client.BodyPath(dst.path)},
				Recursive:   recursive, Sync: sync,
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !wait {
				fmt.Fprintln(out, t.ID)
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "transfer %s\n", t.ID)
			var bar interface {
				Set64(int64) error
				ChangeMax64(int64)
				Finish() error
			}
			if b := progress.newBar(cmd.ErrOrStderr(), -1, src.String()); b != nil {
				bar = b
			}
			final, err := c.WaitTransfer(ctx, t.ID, func(t client.Transfer) {
				if bar != nil && t.BytesTotal > 0 {
					bar.ChangeMax64(t.BytesTotal)
					_ = bar.Set64(t.BytesDone)
				}
			})
			if err != nil {
				return err
			}
			if bar != nil {
				_ = bar.Finish()
			}
			fmt.Fprintf(out, "%s %s: %d files, %d bytes\n", final.ID, final.Status, final.FilesDone, final.BytesDone)
			if final.Status != "succeeded" {
				return fmt.Errorf("transfer %s %s: %s", final.ID, final.Status, final.Error)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy a directory's contents into DST")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the transfer with a progress bar until it has finished")
	cmd.Flags().StringVar(&sync, "sync", "", "skip files already there: exists, size, mtime or checksum")
	cmd.Flags().BoolVarP(&progress.quiet, "quiet", "q", false, "no progress bar")
	cmd.Flags().BoolVar(&progress.force, "progress", false, "draw the progress bar even when stderr is not a terminal")
	return cmd
}

func newTransfersCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "transfers",
		Short: "List your transfers, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			ts, err := c.Transfers(cmd.Context(), limit)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tDONE\tSOURCE\tDESTINATION\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s:%s\t%s:%s\t%s\n", t.ID, t.Status, t.BytesDone, t.BytesTotal,
					t.Source.System, t.Source.Path, t.Destination.System, t.Destination.Path, t.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many")
	return cmd
}

func newCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a transfer (its temporary files are removed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			t, err := c.CancelTransfer(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", t.ID, t.Status)
			return nil
		},
	}
}
