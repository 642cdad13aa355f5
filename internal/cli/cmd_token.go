package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/service"
)

type tokenOptions struct {
	globalOptions
	user   string
	groups []string
	ttl    time.Duration
}

func newTokenCmd() *cobra.Command {
	var o tokenOptions
	cmd := &cobra.Command{
		Use:   "token --user NAME [--group G]...",
		Short: "Print a bearer JWT (HS256, signed with the data dir's secret) for development and admin use",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.user == "" {
				return errors.New("--user is required")
			}
			if o.ttl <= 0 {
				return errors.New("--ttl must be positive: tokens always expire")
			}
			cfg, err := o.load()
			if err != nil {
				return err
			}
			sec, err := service.TokenSecret(cfg)
			if err != nil {
				return err
			}
			tok, err := auth.IssueHS256Groups(sec, o.user, cfg.Auth.GroupsClaim, o.groups, o.ttl, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVar(&o.user, "user", "", "user name (the token's sub claim)")
	cmd.Flags().StringSliceVar(&o.groups, "group", nil, "a group the user belongs to, in the auth.groups_claim claim (repeat for several), for group grants")
	cmd.Flags().DurationVar(&o.ttl, "ttl", time.Hour, "lifetime of the token")
	return cmd
}
