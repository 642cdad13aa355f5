package cli

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/wanem"
)

type wanemOptions struct {
	listen, upstream, rate string
	rtt                    time.Duration
}

func newWanemCmd() *cobra.Command {
	var o wanemOptions
	cmd := &cobra.Command{
		Use:   "wanem --listen ADDR --upstream ADDR --rtt 50ms --rate 1gbit",
		Short: "Run a user-space TCP proxy that adds delay and caps bandwidth (a long fat network for tests)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.upstream == "" {
				return errors.New("--upstream is required")
			}
			rate, err := wanem.ParseRate(o.rate)
			if err != nil {
				return err
			}
			log := newLogger(defaultLogConfig(), cmd.ErrOrStderr())
			return wanem.Run(cmd.Context(), wanem.Config{Listen: o.listen, Upstream: o.upstream, RTT: o.rtt, Rate: rate}, log)
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:0", "address to accept connections on")
	cmd.Flags().StringVar(&o.upstream, "upstream", "", "address to forward to (e.g. a loopback sshd)")
	cmd.Flags().DurationVar(&o.rtt, "rtt", 50*time.Millisecond, "round-trip time to add (half each way)")
	cmd.Flags().StringVar(&o.rate, "rate", "0", "bandwidth per direction, e.g. 1gbit, 100mbit, 50MB/s (0 = unlimited)")
	return cmd
}
