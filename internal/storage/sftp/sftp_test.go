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
// pool as the API reaches systems, each test in a fresh directory that is the backend's root:
// once with one SFTP channel, once with uploads striped over three.
func TestContract(t *testing.T) {
	srv := sshtest.New(t, sshtest.Options{})
	pool, target := testPool(t, srv)
	fss := channels(t, pool, target, srv, 3)
	for _, tc := range []struct {
		name string
		new  func(dir string) *Backend
	}{
		{"one-channel", func(dir string) *Backend { return New(fss[0], dir) }},
		{"striped", func(dir string) *Backend { return NewStriped(dir, fss...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storagetest.Run(t, storagetest.Harness{
				New: func(t *testing.T) storage.Backend { return tc.new(srv.MkTemp(t)) },
				Leftovers: func(t *testing.T, sb storage.Backend) int {
					return leftovers(t, sb.(*Backend))
				},
			})
		})
	}
}

// testPool is a started connection pool and the target of srv's test user.
func testPool(t *testing.T, srv *sshtest.Server) (*sshpool.Pool, sshpool.Target) {
	t.Helper()
	pool := sshpool.New(sshpool.Config{}, slog.New(slog.DiscardHandler), nil)
	if err := pool.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Stop(context.Background()) })
	return pool, sshpool.Target{Key: sshpool.Key{System: "alice/hpc", User: srv.User, Credential: "test"}, Addr: srv.Addr,
		Config: srv.ClientConfig(), MaxSessions: 10}
}

// channels opens n dedicated SFTP channels to target, a files.FS on each.
func channels(t *testing.T, pool *sshpool.Pool, target sshpool.Target, srv *sshtest.Server, n int) []*files.FS {
	t.Helper()
	var fss []*files.FS
	for range n {
		lease, err := pool.DedicatedSFTP(t.Context(), target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lease.Close() })
		fss = append(fss, files.New(lease.Client, command.Exec{Pool: pool, Target: target}, files.Options{Home: srv.Home}))
	}
	return fss
}

// leftovers counts the temporary files under b's root.
func leftovers(t *testing.T, b *Backend) int {
	t.Helper()
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
}
