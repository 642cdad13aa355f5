package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/client"
)

// exitStatus is an error that makes Main exit with a given code without printing anything (the
// remote command's own output said what happened).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRunCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run SYSTEM -- CMD [ARGS...]",
		Short: "Run a command on a system, streaming its output; exits with the remote exit status",
		Long: "Run a command with the remote user's login shell. As with ssh, CMD and ARGS are joined with\n" +
			"spaces into one shell command line, so quote what the remote shell must not expand.",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: completeSystem,
		RunE: func(cmd *cobra.Command, args []string) error {
			if at := cmd.ArgsLenAtDash(); at != -1 && at != 1 {
				return fmt.Errorf("usage: sshapi run SYSTEM -- CMD [ARGS...]")
			}
			c, err := apiClient()
			if err != nil {
				return err
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			ev, err := c.Run(cmd.Context(), args[0], strings.Join(args[1:], " "), timeout, func(ev client.CommandEvent) error {
				w := stdout
				if ev.Type == "stderr" {
					w = stderr
				}
				_, err := w.Write(ev.Bytes())
				return err
			})
			if err != nil {
				return err
			}
			switch r := ev.Result; {
			case r == nil:
				return fmt.Errorf("no result")
			case r.TimedOut:
				fmt.Fprintf(stderr, "sshapi: timed out after %s; the remote process group was killed\n", timeout)
				return exitStatus(124)
			case r.ExitStatus == nil:
				fmt.Fprintf(stderr, "sshapi: killed by signal %s\n", r.Signal)
				return exitStatus(128)
			case *r.ExitStatus != 0:
				return exitStatus(*r.ExitStatus)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the remote command after this long (default: the server's, 60s)")
	return cmd
}

// completeSystem completes the first argument with the caller's system ids.
func completeSystem(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	c, err := apiClient()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	systems, err := c.Systems(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, s := range systems {
		if strings.HasPrefix(s.ID, toComplete) {
			out = append(out, s.ID)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
