package study

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/auth"
	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/config"
	"github.com/sshapi/sshapi/internal/service"
	"github.com/sshapi/sshapi/internal/sshtest"
)

// lab is the setting every self-hosted bench runs in: a throwaway OpenSSH sshd on loopback and
// a local scratch directory for sshapi's data and the OpenSSH clients' key files. Close stops
// the sshd and removes the scratch directory and the directories userDir made.
type lab struct {
	srv  *sshtest.Server
	tmp  string
	dirs []string
}

// startLab starts the sshd with sshdConfig appended to its stock configuration.
func startLab(ctx context.Context, sshdConfig string) (*lab, error) {
	srv, err := sshtest.Start(ctx, sshtest.Options{ExtraConfig: sshdConfig})
	if err != nil {
		return nil, fmt.Errorf("start sshd: %w", err)
	}
	tmp, err := os.MkdirTemp("", "sshapi-bench-")
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	return &lab{srv: srv, tmp: tmp}, nil
}

// startListLab starts a lab and creates a directory of n empty files for this run in the remote
// user's home (where remote commands start, so `ls <its base name>` lists it), named after name
// as userDir does.
func startListLab(ctx context.Context, sshdConfig, name string, n int) (*lab, string, error) {
	l, err := startLab(ctx, sshdConfig)
	if err != nil {
		return nil, "", err
	}
	dir, err := l.userDir(name)
	for i := 0; err == nil && i < n; i++ {
		var f *os.File
		if f, err = os.Create(filepath.Join(dir, fmt.Sprintf("f%05d", i))); err == nil {
			err = f.Close()
		}
	}
	if err != nil {
		l.Close()
		return nil, "", fmt.Errorf("list dir: %w", err)
	}
	return l, dir, nil
}

// Close stops the sshd and removes the scratch directory and the user's bench directories.
func (l *lab) Close() {
	_ = l.removeDirs()
	_ = os.RemoveAll(l.tmp)
	_ = l.srv.Close()
}

// service runs sshapi in-process with cfg (its data in the scratch directory under name, its
// address a free loopback port) and returns a client for a bench user and the function that
// stops it. Log records go to h (nil: errors to stderr).
func (l *lab) service(ctx context.Context, name string, cfg config.Config, h slog.Handler) (*bench.API, func(), error) {
	cfg.DataDir, cfg.Addr, cfg.LogLevel = filepath.Join(l.tmp, name), "127.0.0.1:0", "error"
	if h == nil {
		h = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})
	}
	svc, err := service.New(ctx, cfg, slog.New(h))
	if err != nil {
		return nil, nil, fmt.Errorf("sshapi service: %w", err)
	}
	if err := svc.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("start sshapi: %w", err)
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
	}
	sec, err := service.TokenSecret(cfg)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("dev secret: %w", err)
	}
	tok, err := auth.IssueHS256(sec, "bench", 24*time.Hour, time.Now())
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("token: %w", err)
	}
	return &bench.API{BaseURL: "http://" + svc.Addr(), Token: tok}, stop, nil
}

// benchSystem is the system id under which system registers the lab's sshd.
const benchSystem = "bench"

// system starts a service with cfg (data under name) and registers the sshd with it, directly,
// as benchSystem; it returns the client and the function that stops the service.
func (l *lab) system(ctx context.Context, name string, cfg config.Config) (*bench.API, func(), error) {
	api, stop, err := l.service(ctx, name, cfg, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := l.register(ctx, api, benchSystem, l.srv.Host, l.srv.Port, nil); err != nil {
		stop()
		return nil, nil, err
	}
	return api, stop, nil
}

// envConfig is sshapi's defaults overlaid with SSHAPI_* environment variables (and
// SSHAPI_CONFIG), so a self-hosted bench can vary a setting.
func envConfig() (config.Config, error) {
	cfg, err := config.Read("")
	if err != nil {
		return config.Config{}, fmt.Errorf("sshapi config: %w", err)
	}
	return cfg, nil
}

// userDir creates a directory for this run alone in the remote user's home, owned by that user:
// name (one path element) with a unique suffix, name-<pid>-<random>, because every lab's sshd
// logs into the same account (sshtest.DefaultUser) and concurrent runs must not share, replace or
// remove each other's files. Close removes it.
func (l *lab) userDir(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("remote dir %q: want one path element", name)
	}
	dir, err := os.MkdirTemp(l.srv.Home, fmt.Sprintf("%s-%d-*", name, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("remote dir: %w", err)
	}
	l.dirs = append(l.dirs, dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("remote dir: %w", err)
	}
	return dir, l.chown(dir)
}

// removeDirs removes the directories userDir made. It refuses (and reports) any path that is not
// a directory entry directly under the remote home, so a wrong entry can never take the home or
// anything outside it along.
func (l *lab) removeDirs() error {
	home := l.srv.Home
	var errs []error
	for _, d := range l.dirs {
		base := filepath.Base(d)
		if !filepath.IsAbs(home) || d != filepath.Clean(d) || filepath.Dir(d) != filepath.Clean(home) || base == "." || base == ".." || base == "/" {
			errs = append(errs, fmt.Errorf("remove %q: not a run directory under %s", d, home))
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove run directory: %w", err))
		}
	}
	l.dirs = nil
	return errors.Join(errs...)
}

// chown gives path to the remote user.
func (l *lab) chown(path string) error {
	u, err := user.Lookup(l.srv.User)
	if err != nil {
		return fmt.Errorf("remote user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

// sshdPIDs is the sshd master process, whose tree the CPU meter follows (nil if unknown).
func (l *lab) sshdPIDs() []int {
	b, err := os.ReadFile(filepath.Join(l.srv.Dir, "sshd.pid"))
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return []int{pid}
}

// sshEndpoint writes the client key and a known_hosts file for host:port (the sshd or a proxy
// in front of it) into the scratch subdirectory name and returns the endpoint the OpenSSH
// clients use.
func (l *lab) sshEndpoint(name, host string, port int) (bench.SSHEndpoint, error) {
	dir := filepath.Join(l.tmp, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return bench.SSHEndpoint{}, fmt.Errorf("key dir: %w", err)
	}
	return bench.WriteSSHFiles(dir, bench.SSHEndpoint{Host: host, Port: port, User: l.srv.User, HostKey: l.srv.AuthorizedHostKey()}, l.srv.PrivateKeyPEM)
}

// register creates system id at host:port (the sshd itself or a proxy in front of it) with the
// extra fields, and stores the sshd's key as its credential.
func (l *lab) register(ctx context.Context, api *bench.API, id, host string, port int, fields map[string]any) error {
	body := map[string]any{"id": id, "host": host, "port": port, "host_keys": []string{l.srv.AuthorizedHostKey()}}
	for k, v := range fields {
		body[k] = v
	}
	if err := api.Call(ctx, "POST", "/v1/systems", body, 201, nil); err != nil {
		return fmt.Errorf("register system %s: %w", id, err)
	}
	if err := api.Call(ctx, "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": l.srv.User, "private_key": string(l.srv.PrivateKeyPEM)}, 200, nil); err != nil {
		return fmt.Errorf("store credential %s: %w", id, err)
	}
	return nil
}
