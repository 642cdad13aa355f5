package study

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/sshapi/sshapi/internal/wanem"
)

// TransferPath is one network path between the bench and the sshd: plain loopback when RTT and
// Rate are zero, otherwise a wanem proxy in front of the sshd for each system.
type TransferPath struct {
	// RTT is the added round-trip time; Rate the bandwidth cap per direction in bytes/s.
	RTT  time.Duration
	Rate int64
}

// Name labels the path in reports ("loopback", "1 Gbit/s × 50ms").
func (p TransferPath) Name() string {
	if p.RTT == 0 && p.Rate == 0 {
		return "loopback"
	}
	rate := "unlimited"
	if p.Rate > 0 {
		rate = fmt.Sprintf("%g Gbit/s", float64(p.Rate)*8/1e9)
		if p.Rate*8 < 1e9 {
			rate = fmt.Sprintf("%g Mbit/s", float64(p.Rate)*8/1e6)
		}
	}
	return fmt.Sprintf("%s × %s RTT (wanem)", rate, p.RTT)
}

// TransferOptions configure a self-hosted transfer bench. Zero values take the defaults noted.
type TransferOptions struct {
	// Size of the file moved (default 256 MiB).
	Size int64
	// Streams are the system-to-system stream counts, 0 = automatic (default 1, 4, 8, auto).
	Streams []int
	// Connections are the n of the scaling runs (none by default).
	Connections []int
	// Paths to measure (default loopback).
	Paths []TransferPath
	// Compare measures OpenSSH sftp and scp -3 beside sshapi.
	Compare bool
	// Verify is the transfers' verification (default sha256).
	Verify string
	// Ciphers, when set, replaces the runs above by an upload and a download per cipher: sshapi
	// with a system whose ciphers list is just that cipher, beside `sftp -c` with Compare.
	Ciphers []string
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
}

func (o *TransferOptions) defaults() {
	if o.Size <= 0 {
		o.Size = 256 << 20
	}
	if o.Streams == nil {
		o.Streams = []int{1, 4, 8, 0}
	}
	if len(o.Paths) == 0 {
		o.Paths = []TransferPath{{}}
	}
	if o.Verify == "" {
		o.Verify = "sha256"
	}
}

// RunTransfer starts a throwaway stock sshd and an in-process sshapi, registers the sshd as two
// systems per path (directly on loopback, or each through its own wanem proxy), and measures
// upload, download and system-to-system transfers through the HTTP API, beside OpenSSH when
// o.Compare is set.
func RunTransfer(ctx context.Context, o TransferOptions) (*bench.TransferReport, error) {
	o.defaults()
	loadStart := loadAverage()
	srv, err := sshtest.Start(ctx, sshtest.Options{})
	if err != nil {
		return nil, fmt.Errorf("start sshd: %w", err)
	}
	defer srv.Close()
	tmp, err := os.MkdirTemp("", "sshapi-transfer-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	api, stop, err := startService(ctx, filepath.Join(tmp, "data"))
	if err != nil {
		return nil, err
	}
	defer stop()

	remoteDir := filepath.Join(srv.Home, "bench-transfer")
	_ = os.RemoveAll(remoteDir)
	if err := os.Mkdir(remoteDir, 0o755); err != nil {
		return nil, fmt.Errorf("remote dir: %w", err)
	}
	defer os.RemoveAll(remoteDir)
	if u, err := user.Lookup(srv.User); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		_ = os.Chown(remoteDir, uid, gid)
	}
	local := filepath.Join(tmp, "src.bin")
	if err := randomFile(local, o.Size); err != nil {
		return nil, err
	}
	var pids []int
	if b, err := os.ReadFile(filepath.Join(srv.Dir, "sshd.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids = append(pids, pid)
		}
	}

	rep := &bench.TransferReport{Meta: Machine(ctx)}
	rep.Meta.Started = time.Now()
	rep.Meta.Runs = 1
	rep.Meta.SSHD = "OpenSSH sshd on 127.0.0.1, stock configuration; both systems of a system-to-system transfer are this sshd, registered twice"
	rep.Meta.Versions = map[string]map[string]string{"sshapi": {"sshapi": service.Version}}
	for i, path := range o.Paths {
		var stops []func()
		endpoint := func(id string, fields map[string]any) (bench.TransferEndpoint, error) {
			host, port := srv.Host, srv.Port
			if path.RTT > 0 || path.Rate > 0 {
				p, err := wanem.New(wanem.Config{Listen: "127.0.0.1:0", Upstream: srv.Addr, RTT: path.RTT, Rate: path.Rate})
				if err != nil {
					return bench.TransferEndpoint{}, fmt.Errorf("wanem: %w", err)
				}
				if err := p.Start(ctx); err != nil {
					return bench.TransferEndpoint{}, fmt.Errorf("wanem: %w", err)
				}
				stops = append(stops, func() { _ = p.Stop() })
				a := p.Addr().(*net.TCPAddr)
				host, port = a.IP.String(), a.Port
			}
			if err := registerAt(ctx, api, id, host, port, srv, fields); err != nil {
				return bench.TransferEndpoint{}, err
			}
			dir := filepath.Join(tmp, id)
			if err := os.Mkdir(dir, 0o700); err != nil {
				return bench.TransferEndpoint{}, fmt.Errorf("key dir: %w", err)
			}
			ep, err := bench.WriteSSHFiles(dir, bench.SSHEndpoint{Host: host, Port: port, User: srv.User, HostKey: srv.AuthorizedHostKey()}, srv.PrivateKeyPEM)
			return bench.TransferEndpoint{System: id, SSH: ep}, err
		}
		stopAll := func() {
			for _, s := range stops {
				s()
			}
		}
		if len(o.Ciphers) > 0 {
			err := runCiphers(ctx, o, path.Name(), func(c string) (bench.TransferEndpoint, error) {
				return endpoint(fmt.Sprintf("xfer%d-%s", i, strings.NewReplacer("@", "_", "+", "_").Replace(c)), map[string]any{"ciphers": []string{c}})
			}, &bench.TransferBench{API: api, Local: local, Size: o.Size, RemoteDir: remoteDir, Peers: o.Compare, SSHDPIDs: pids,
				Progress: o.Progress, Report: rep})
			stopAll()
			if err != nil {
				return rep, err
			}
			continue
		}
		src, err := endpoint(fmt.Sprintf("xfer%d-a", i), nil)
		if err != nil {
			stopAll()
			return rep, err
		}
		dst, err := endpoint(fmt.Sprintf("xfer%d-b", i), nil)
		if err != nil {
			stopAll()
			return rep, err
		}
		tb := &bench.TransferBench{API: api, Path: path.Name(), Src: src, Dst: dst, Local: local, Size: o.Size, RemoteDir: remoteDir,
			Verify: o.Verify, Peers: o.Compare, SSHDPIDs: pids, Progress: o.Progress, Report: rep,
			Remove: func(p string) error { return os.Remove(p) }}
		err = tb.Run(ctx, o.Streams, o.Connections)
		stopAll()
		if err != nil {
			return rep, err
		}
	}
	rep.Meta.Notes = []string{
		fmt.Sprintf("a %d MiB file of random bytes, once per point; MB/s is 10^6 bytes per second of wall time: one HTTP request for upload and download (sshapi streams the body through SFTP on a pooled connection), submit to `succeeded` for a system-to-system transfer (`POST /v1/transfers`, polled every 20 ms), process start to exit for OpenSSH", o.Size>>20),
		"system-to-system transfers verify with " + o.Verify + " on both systems before they succeed (scp -3 verifies nothing); uploads and downloads do not verify",
		"with a cipher: sshapi's system is registered with `ciphers: [that cipher]` (golang.org/x/crypto/ssh), OpenSSH runs `sftp -c` that cipher (OpenSSH's own implementation, usually OpenSSL's AES-NI code); the MAC is each side's default for the cipher (none for the AEAD ciphers)",
		"OpenSSH peers: `sftp -b -` put / get to /dev/null, and `scp -3` relaying through this host, each a fresh process and connection over the same path (the same wanem proxies) as sshapi",
		"CPU: user+system seconds of the bench process (which hosts sshapi) plus its waited-for children (the OpenSSH clients), and of the sshd process tree (sessions and sftp-server), sampled from /proc every 100 ms (a lower bound: a process shorter than that is missed)",
		fmt.Sprintf("1-minute load average when the transfer runs started: %s; when they ended: %s", loadStart, loadAverage()),
	}
	return rep, nil
}

// runCiphers measures upload and download once per cipher in o.Ciphers on one path: endpoint
// registers a system limited to the cipher, and tmpl (its API, file and report) is copied for
// each.
func runCiphers(ctx context.Context, o TransferOptions, path string, endpoint func(cipher string) (bench.TransferEndpoint, error), tmpl *bench.TransferBench) error {
	for _, c := range o.Ciphers {
		ep, err := endpoint(c)
		if err != nil {
			return err
		}
		tb := *tmpl
		tb.Path, tb.Src, tb.Cipher = path, ep, c
		if err := tb.RunUpDown(ctx); err != nil {
			return err
		}
	}
	return nil
}

func randomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("source file: %w", err)
	}
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		f.Close()
		return fmt.Errorf("source file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("source file: %w", err)
	}
	return nil
}

// startService runs sshapi in-process on dataDir and returns a client for a bench user. The
// defaults are overlaid with SSHAPI_* environment variables, so a run can vary a setting (e.g.
// SSHAPI_HTTP_STRIPE_MAX_CHANNELS=1 for unstriped downloads and uploads).
func startService(ctx context.Context, dataDir string) (*bench.API, func(), error) {
	cfg, err := config.Read("")
	if err != nil {
		return nil, nil, err
	}
	cfg.DataDir, cfg.Addr, cfg.LogLevel = dataDir, "127.0.0.1:0", "error"
	svc, err := service.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
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

// registerAt creates system id at host:port (srv itself or a proxy in front of it) and stores
// srv's key as the credential.
func registerAt(ctx context.Context, api *bench.API, id, host string, port int, srv *sshtest.Server, fields map[string]any) error {
	body := map[string]any{"id": id, "host": host, "port": port, "host_keys": []string{srv.AuthorizedHostKey()}}
	for k, v := range fields {
		body[k] = v
	}
	if err := api.Call(ctx, "POST", "/v1/systems", body, 201, nil); err != nil {
		return fmt.Errorf("register system %s: %w", id, err)
	}
	if err := api.Call(ctx, "PUT", "/v1/systems/"+id+"/credential", map[string]any{"username": srv.User, "private_key": string(srv.PrivateKeyPEM)}, 200, nil); err != nil {
		return fmt.Errorf("store credential %s: %w", id, err)
	}
	return nil
}

// TransferSection writes the transfer report's tables and figure into a Markdown document.
func TransferSection(w io.Writer, r *bench.TransferReport, imgs []string) error {
	if r == nil || len(r.Runs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("## File transfers\n\nThroughput of moving one file through sshapi's HTTP API (upload, download, and a system-to-system transfer with n SFTP streams) beside OpenSSH's own clients over the same path. \"sshapi ÷ OpenSSH\" is sshapi's MB/s divided by the OpenSSH client's on the same path (above 1 means sshapi is faster).\n\n")
	for _, n := range r.Meta.Notes {
		fmt.Fprintf(&b, "- %s.\n", n)
	}
	b.WriteString("\n")
	if err := r.WriteMarkdown(&b); err != nil {
		return err
	}
	for _, img := range imgs {
		fmt.Fprintf(&b, "![File transfer throughput per stream count](img/%s)\n\n*sshapi system-to-system MB/s per stream count used, scp -3 as a flat line.*\n\n", img)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("transfer section: %w", err)
	}
	return nil
}

// PaperTransferOptions are the transfer runs of `bench paper`: a file of size bytes
// on loopback and through 1 Gbit/s × 50 ms wanem proxies, one stream, 4, 8 and automatic,
// beside OpenSSH sftp and scp -3, and the scaling runs at 1, 2, 4 and 8 connections.
func PaperTransferOptions(size int64, progress io.Writer) TransferOptions {
	return TransferOptions{Size: size, Streams: []int{1, 4, 8, 0}, Connections: []int{1, 2, 4, 8}, Compare: true, Progress: progress,
		Paths: []TransferPath{{}, {RTT: 50 * time.Millisecond, Rate: 125_000_000}}}
}

// writeTransferOutputs adds tr's runs to benchmarks.json under "transfers" (beside the
// study's meta and runs) and draws its figure; it returns the figure names.
func writeTransferOutputs(report *bench.Report, tr *bench.TransferReport, out string) ([]string, error) {
	if tr == nil || len(tr.Runs) == 0 {
		return nil, nil
	}
	merged := struct {
		*bench.Report
		Transfers *bench.TransferReport `json:"transfers"`
	}{report, tr}
	b, err := json.MarshalIndent(merged, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "benchmarks.json"), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("write report: %w", err)
	}
	return tr.WritePlots(filepath.Join(out, "img"))
}
