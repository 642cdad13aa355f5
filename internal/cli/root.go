// Package cli defines sshapi's command line: one file per subcommand, each with its options
// struct, its flags and its run function. cmd/sshapi only calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/config"
)

// Main runs the CLI with args and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		var st exitStatus
		if errors.As(err, &st) {
			return int(st)
		}
		fmt.Fprintln(stderr, "sshapi:", err)
		return 1
	}
	return 0
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "sshapi",
		Short:         "An HTTP API for running commands and moving files on HPC systems over pooled SSH",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServeCmd(), newTokenCmd(), newVersionCmd(), newWanemCmd(), newDemoCmd())
	root.AddCommand(newKeysCmd(), newMigrateCmd())
	root.AddCommand(newBenchCmd())
	// Client verbs (scp-like SYSTEM:PATH arguments) against a logged-in service.
	root.AddCommand(newLoginCmd(), newSystemsCmd(), newLsCmd(), newStatCmd(), newGetCmd(), newPutCmd(),
		newRmCmd(), newMvCmd(), newCpCmd(), newMkdirCmd(), newCatCmd(), newRunCmd(),
		newTransferCmd(), newTransfersCmd(), newCancelCmd(), newJobsCmd())
	return root
}

// globalOptions are shared by commands that load the service configuration.
type globalOptions struct {
	configFile string
	dataDir    string
	addr       string
}

func (o *globalOptions) addFlags(cmd *cobra.Command, withAddr bool) {
	cmd.Flags().StringVar(&o.configFile, "config", "", "YAML configuration file (SSHAPI_CONFIG)")
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "", "data directory for the database and generated secrets (default ./sshapi-data, SSHAPI_DATA_DIR)")
	if withAddr {
		cmd.Flags().StringVar(&o.addr, "addr", "", "HTTP listen address (default 127.0.0.1:8080, SSHAPI_ADDR)")
	}
}

// load returns the configuration: defaults, file, environment, then flags (the global ones, then
// a command's own edits), validated once all are applied.
func (o *globalOptions) load(edits ...func(*config.Config)) (config.Config, error) {
	file := o.configFile
	if file == "" {
		file = os.Getenv("SSHAPI_CONFIG")
	}
	cfg, err := config.Read(file)
	if err != nil {
		return cfg, err
	}
	if o.dataDir != "" {
		cfg.DataDir = o.dataDir
	}
	if o.addr != "" {
		cfg.Addr = o.addr
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	return cfg, cfg.Validate()
}

func defaultLogConfig() config.Config { return config.Default() }

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
