package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/service"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "sshapi %s (%s)\n", service.Version, runtime.Version())
			return nil
		},
	}
}
