package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/client"
)

// remote is a SYSTEM:PATH argument.
type remote struct {
	system, path string
}

func (r remote) String() string { return r.system + ":" + r.path }

// parseRemote splits SYSTEM:PATH ("hpc:" is the home directory). ok is false for an argument
// without a colon, or with a slash before it (a local path such as ./a:b).
func parseRemote(arg string) (remote, bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.ContainsRune(arg[:i], '/') {
		return remote{}, false
	}
	return remote{system: arg[:i], path: arg[i+1:]}, true
}

func mustRemote(arg string) (remote, error) {
	r, ok := parseRemote(arg)
	if !ok {
		return r, fmt.Errorf("%q is not SYSTEM:PATH", arg)
	}
	return r, nil
}

// remoteRunE wraps verbs whose arguments are all SYSTEM:PATH.
func remoteRunE(fn func(ctx context.Context, c *client.Client, w io.Writer, args []remote) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		rs := make([]remote, len(args))
		for i, a := range args {
			r, err := mustRemote(a)
			if err != nil {
				return err
			}
			rs[i] = r
		}
		c, err := apiClient()
		if err != nil {
			return err
		}
		return fn(cmd.Context(), c, cmd.OutOrStdout(), rs)
	}
}

// completeRemote completes SYSTEM: from the caller's systems.
func completeRemote(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if strings.Contains(toComplete, ":") {
		return nil, cobra.ShellCompDirectiveDefault
	}
	c, err := apiClient()
	if err != nil {
		return nil, cobra.ShellCompDirectiveDefault
	}
	systems, err := c.Systems(cmd.Context())
	if err != nil {
		return nil, cobra.ShellCompDirectiveDefault
	}
	var out []string
	for _, s := range systems {
		if strings.HasPrefix(s.ID, toComplete) {
			out = append(out, s.ID+":")
		}
	}
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveDefault
}

func newSystemsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "systems",
		Short: "List your systems",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient()
			if err != nil {
				return err
			}
			systems, err := c.Systems(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDRESS\tDESCRIPTION")
			for _, s := range systems {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.ID, s.Address(), s.Description)
			}
			return tw.Flush()
		},
	}
}

func newLsCmd() *cobra.Command {
	var long, recursive, all bool
	cmd := &cobra.Command{
		Use:               "ls [-l] [-R] [-a] SYSTEM:PATH",
		Short:             "List a remote directory",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRemote,
		RunE: remoteRunE(func(ctx context.Context, c *client.Client, w io.Writer, rs []remote) error {
			entries, err := c.List(ctx, rs[0].system, rs[0].path, recursive, all)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.AlignRight)
			for _, e := range entries {
				name := e.Name
				if e.Type == "dir" {
					name += "/"
				}
				if e.LinkTarget != "" {
					name += " -> " + e.LinkTarget
				}
				if long {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t %s\n", typeChar(e.Type), e.Mode, e.Size, e.MTime.Local().Format("2006-01-02 15:04"), name)
				} else {
					fmt.Fprintln(w, name)
				}
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVarP(&long, "long", "l", false, "long format: type, mode, size, modification time")
	cmd.Flags().BoolVarP(&recursive, "recursive", "R", false, "list subdirectories too")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "show hidden entries")
	return cmd
}

func typeChar(t string) string {
	switch t {
	case "dir":
		return "d"
	case "symlink":
		return "l"
	case "file":
		return "-"
	}
	return "?"
}

func newStatCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "stat SYSTEM:PATH",
		Short:             "Describe a remote path",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRemote,
		RunE: remoteRunE(func(ctx context.Context, c *client.Client, w io.Writer, rs []remote) error {
			e, err := c.Stat(ctx, rs[0].system, rs[0].path)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "path: %s\ntype: %s\nsize: %d\nmode: %s\nmtime: %s\n", e.Path, e.Type, e.Size, e.Mode, e.MTime.Format("2006-01-02T15:04:05Z07:00"))
			if e.LinkTarget != "" {
				fmt.Fprintf(w, "link_target: %s\n", e.LinkTarget)
			}
			return nil
		}),
	}
}

func newRmCmd() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:               "rm [-r] SYSTEM:PATH...",
		Short:             "Remove remote files (directories with -r)",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeRemote,
		RunE: remoteRunE(func(ctx context.Context, c *client.Client, _ io.Writer, rs []remote) error {
			for _, r := range rs {
				if err := c.Remove(ctx, r.system, r.path, recursive); err != nil {
					return fmt.Errorf("rm %s: %w", r, err)
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	return cmd
}

// sameSystem checks that a two-path verb stays on one system.
func sameSystem(verb string, rs []remote) error {
	if rs[0].system != rs[1].system {
		return fmt.Errorf("%s works within one system; use `sshapi transfer` between %s and %s", verb, rs[0].system, rs[1].system)
	}
	return nil
}

func newMvCmd() *cobra.Command {
	var overwrite bool
	cmd := &cobra.Command{
		Use:               "mv SYSTEM:SRC SYSTEM:DST",
		Short:             "Rename or move a remote path",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeRemote,
		RunE: remoteRunE(func(ctx context.Context, c *client.Client, _ io.Writer, rs []remote) error {
			if err := sameSystem("mv", rs); err != nil {
				return err
			}
			return c.Op(ctx, rs[0].system, "move", map[string]any{"source": rs[0].path, "destination": rs[1].path, "overwrite": overwrite})
		}),
	}
	cmd.Flags().BoolVarP(&overwrite, "force", "f", false, "replace an existing destination")
	return cmd
}

func newCpCmd() *cobra.Command {
	var recursive, overwrite bool
	cmd := &cobra.Command{
		Use:               "cp [-r] SYSTEM:SRC SYSTEM:DST",
		Short:             "Copy on the server (no data passes through sshapi)",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeRemote,
		RunE: remoteRunE(func(ctx context.Context, c *client.Client, _ io.Writer, rs []remote) error {
			if err := sameSystem("cp", rs); err != nil {
				return err
			}
			return c.Op(ctx, rs[0].system, "copy", map[string]any{"source": rs[0].path, "destination": rs[1].path, "recursive": recursive, "overwrite": overwrite})
		}),
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "copy directories")
	cmd.Flags().BoolVarP(&overwrite, "force", "f", false, "replace an existing destination")
	return cmd
}

func newMkdirCmd() *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:               "mkdir [-p] SYSTEM:PATH...",
		Short:             "Create remote directories",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeRemote,
		RunE: remoteRunE(func(ctx context.Context, c *client.Client, _ io.Writer, rs []remote) error {
			for _, r := range rs {
				if err := c.Op(ctx, r.system, "mkdir", map[string]any{"path": r.path, "parents": parents}); err != nil {
					return fmt.Errorf("mkdir %s: %w", r, err)
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create parent directories; no error if it exists")
	return cmd
}

func newCatCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "cat SYSTEM:PATH...",
		Short:             "Print remote files",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeRemote,
		RunE: remoteRunE(func(ctx context.Context, c *client.Client, w io.Writer, rs []remote) error {
			for _, r := range rs {
				body, _, err := c.Open(ctx, r.system, r.path)
				if err != nil {
					return fmt.Errorf("cat %s: %w", r, err)
				}
				_, err = io.Copy(w, body)
				body.Close()
				if err != nil {
					return fmt.Errorf("cat %s: %w", r, err)
				}
			}
			return nil
		}),
	}
}
