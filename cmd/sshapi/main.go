// Command sshapi is the sshapi server, its development token tool, the WAN emulator and the
// demo. All logic lives in internal/; this file only wires the process to the CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sshapi/sshapi/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
