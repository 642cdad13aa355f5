package sftp

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/files"
	"github.com/sshapi/sshapi/internal/sshpool"
	"github.com/sshapi/sshapi/internal/sshtest"
	"github.com/sshapi/sshapi/internal/storage"
	"github.com/sshapi/sshapi/internal/storage/storagetest"
)

// TestContract runs the storage contract against a real OpenSSH sshd, through the connection
// pool as the API reaches systems, each test in a fresh directory that is the backend's root.
func TestContract(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	pool := sshpool.New(sshpool.Config{}, slog.New(slog.DiscardHandler), nil)
	if err := pool.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Stop(context.Background()) })
	target := sshpool.Target{Key: sshpool.Key{System: "alice/hpc", User: srv.User, Credential: "test"}, Addr: srv.Addr,
		Config: srv.ClientConfig(), MaxSessions: 10}
	lease, err := pool.DedicatedSFTP(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Close() })
	storagetest.Run(t, storagetest.Harness{
		New: func(t *testing.T) storage.Backend {
			dir := srv.MkTemp(t)
			return New(files.New(lease.Client, command.Exec{Pool: pool, Target: target}, files.Options{Home: srv.Home}), dir)
		},
		Leftovers: func(t *testing.T, sb storage.Backend) int {
			b := sb.(*Backend)
			n := 0
			var walk func(dir string)
			walk = func(dir string) {
				page, err := b.List(t.Context(), dir, "", 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range page.Entries {
					if files.IsTempName(e.Name) {
						n++
					}
					if e.Type == storage.TypeDir {
						walk(strings.TrimSuffix(dir, "/") + "/" + e.Name)
					}
				}
			}
			walk("/")
			return n
		},
	})
}
