package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/secret"
	"github.com/sshapi/sshapi/internal/service"
)

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Credential master keys shared by several instances",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "generate",
		Short: `Print a new master key line ("<id>:<base64>") for keys.master_key_file`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := secret.NewKeyLine()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	})
	var o globalOptions
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Re-wrap every credential under the primary (first) master key, while the service runs",
		Long: `Re-wraps the data key of every credential sealed under an older master key with the primary
one (the first line of keys.master_key_file). Put the new key first on every instance (keeping
the old one on the next line), restart them one at a time, then run this; afterwards the old
key may be removed. Ciphertexts do not change, so instances keep serving throughout.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.load()
			if err != nil {
				return err
			}
			n, err := service.RotateKeys(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "re-wrapped %d credentials under the primary master key\n", n)
			return nil
		},
	}
	o.addFlags(rotate, false)
	cmd.AddCommand(rotate)
	return cmd
}

type migrateOptions struct {
	globalOptions
	from, fromTransfers, to string
}

func newMigrateCmd() *cobra.Command {
	var o migrateOptions
	cmd := &cobra.Command{
		Use:   "migrate [--from SQLITE_FILE --to postgres://…]",
		Short: "Apply database migrations, or copy a SQLite deployment into PostgreSQL",
		Long: `Without --from: apply pending migrations to the configured database (the store, the transfer
tables and River's) and exit.

With --from and --to: copy a stopped single-instance deployment (its sshapi.db: systems,
credentials still sealed, audit log; and transfers.db next to it: transfers with their items and
finished ranges) into an empty PostgreSQL database. Unfinished transfers are queued again there
and resume. Instances on PostgreSQL need the same master keys (keys.master_key_file) as the old
deployment's data_dir/master.key.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.from != "" || o.to != "" {
				if o.from == "" || o.to == "" {
					return fmt.Errorf("migrate: --from and --to go together")
				}
				rep, err := service.CopyDeployment(cmd.Context(), o.from, o.fromTransfers, o.to)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "copied %d systems, %d credentials, %d audit entries, %d transfers (%d items, %d ranges; %d unfinished re-queued)\n",
					rep.Systems, rep.Credentials, rep.Audit, rep.Transfers.Transfers, rep.Transfers.Items, rep.Transfers.Ranges, rep.Transfers.Requeued)
				return nil
			}
			cfg, err := o.load()
			if err != nil {
				return err
			}
			db, tdb, err := service.OpenDatabases(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			tdb.Close()
			db.Close()
			kind := "SQLite in " + cfg.DataDir
			if service.IsPostgres(cfg.Database) {
				kind = "PostgreSQL"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "migrations applied (%s)\n", kind)
			return nil
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVar(&o.from, "from", "", "SQLite store file of the deployment to copy (its data_dir/sshapi.db)")
	cmd.Flags().StringVar(&o.fromTransfers, "from-transfers", "", "its transfers file (default: transfers.db next to --from)")
	cmd.Flags().StringVar(&o.to, "to", "", "empty PostgreSQL database to copy into (postgres://…)")
	return cmd
}
