package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/bench/study"
	"github.com/sshapi/sshapi/internal/wanem"
)

// benchOptions are the flags every `sshapi bench` subcommand that measures a running service
// shares.
type benchOptions struct {
	url, token, system string
	compare            string
	ssh, sshKey        string
	sshHostKey         string
	python, peersDir   string
	conns, sessions    int
	concurrencyCap     int
	timeout, drain     time.Duration
	jsonOut, mdOut     string
	plots              string
	quiet              bool
}

func (o *benchOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.url, "url", os.Getenv("SSHAPI_URL"), "sshapi base URL (SSHAPI_URL)")
	f.StringVar(&o.token, "token", "", "bearer token (default $SSHAPI_TOKEN)")
	f.StringVar(&o.system, "system", "", "system id / named credential to run on")
	f.StringVar(&o.compare, "compare", "", "peers to measure beside sshapi against the same sshd: all or a list of "+strings.Join(bench.AllPeers, ","))
	f.StringVar(&o.ssh, "ssh", "", "the sshd the system points at, for --compare: user@host[:port]")
	f.StringVar(&o.sshKey, "ssh-key", "", "private key file for --compare")
	f.StringVar(&o.sshHostKey, "ssh-host-key", "", "the sshd's host key for --compare, 'ssh-ed25519 AAAA...'")
	f.StringVar(&o.python, "python", "bench/.venv/bin/python", "Python with the peers' requirements (make bench-deps)")
	f.StringVar(&o.peersDir, "peers-dir", "bench/peers", "directory of the Python peers")
	f.IntVar(&o.conns, "peer-conns", 6, "connections of the pooled peers (and ControlMaster connections of openssh-mux)")
	f.IntVar(&o.sessions, "peer-sessions", 8, "channels per connection of the pooled Python peers")
	f.IntVar(&o.concurrencyCap, "concurrency-cap", 256, "most requests in flight per run (0 = no cap); waiting for a slot counts in latency")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "per-request timeout")
	f.DurationVar(&o.drain, "drain", 10*time.Second, "how long stragglers may finish after a rate's window")
	f.StringVar(&o.jsonOut, "json", "", "write every run's summary to this JSON file")
	f.StringVar(&o.mdOut, "markdown", "", "write Markdown tables to this file")
	f.StringVar(&o.plots, "plots", "", "write PNG figures into this directory")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress on stderr")
}

// targets validates the options and returns the targets to measure (not started).
func (o *benchOptions) targets() (*bench.Targets, error) {
	if o.token == "" {
		o.token = os.Getenv("SSHAPI_TOKEN")
	}
	switch {
	case o.url == "":
		return nil, errors.New("--url (or SSHAPI_URL) is required")
	case o.token == "":
		return nil, errors.New("--token (or SSHAPI_TOKEN) is required")
	case o.system == "":
		return nil, errors.New("--system is required")
	}
	peers, err := bench.ParsePeers(o.compare)
	if err != nil {
		return nil, fmt.Errorf("--compare: %w", err)
	}
	t := &bench.Targets{API: &bench.API{BaseURL: o.url, Token: o.token}, System: o.system, Peers: peers,
		Python: o.python, PeersDir: o.peersDir, Conns: o.conns, Sessions: o.sessions}
	if len(peers) == 0 {
		return t, nil
	}
	if o.ssh == "" || o.sshKey == "" || o.sshHostKey == "" {
		return nil, errors.New("--compare needs --ssh user@host[:port], --ssh-key and --ssh-host-key")
	}
	ep, err := parseSSH(o.ssh)
	if err != nil {
		return nil, err
	}
	ep.HostKey = strings.TrimSpace(o.sshHostKey)
	key, err := os.ReadFile(o.sshKey)
	if err != nil {
		return nil, fmt.Errorf("--ssh-key: %w", err)
	}
	dir, err := os.MkdirTemp("", "sshapi-bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	if t.Endpoint, err = bench.WriteSSHFiles(dir, ep, key); err != nil {
		return nil, err
	}
	return t, nil
}

func parseSSH(s string) (bench.SSHEndpoint, error) {
	userPart, hostPart, ok := strings.Cut(s, "@")
	if !ok || userPart == "" || hostPart == "" {
		return bench.SSHEndpoint{}, fmt.Errorf("--ssh %q: want user@host[:port]", s)
	}
	ep := bench.SSHEndpoint{User: userPart, Host: hostPart, Port: 22}
	if h, p, err := net.SplitHostPort(hostPart); err == nil {
		port, perr := strconv.Atoi(p)
		if perr != nil || port < 1 || port > 65535 {
			return bench.SSHEndpoint{}, fmt.Errorf("--ssh %q: bad port", s)
		}
		ep.Host, ep.Port = h, port
	}
	return ep, nil
}

func (o *benchOptions) runner(t *bench.Targets, stderr io.Writer) *bench.Runner {
	r := &bench.Runner{Targets: t, Report: &bench.Report{Meta: study.Machine(context.Background())},
		Timeout: o.timeout, Drain: o.drain, MaxInFlight: o.concurrencyCap, Warmup: 24}
	r.Report.Meta.Started = time.Now()
	r.Report.Meta.Runs = 1
	if !o.quiet {
		r.Progress = stderr
	}
	return r
}

// measure starts the targets, runs fn, stops them and writes the outputs.
func (o *benchOptions) measure(ctx context.Context, stdout, stderr io.Writer, fn func(ctx context.Context, r *bench.Runner) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t, err := o.targets()
	if err != nil {
		return err
	}
	if t.Endpoint.KeyFile != "" {
		defer os.RemoveAll(dirOf(t.Endpoint.KeyFile))
	}
	if err := t.Start(ctx); err != nil {
		return err
	}
	defer t.Stop()
	r := o.runner(t, stderr)
	r.Report.Meta.Versions = t.Versions()
	runErr := fn(ctx, r)
	if len(r.Report.Runs) == 0 {
		return runErr
	}
	return errors.Join(runErr, o.write(r.Report, stdout))
}

func dirOf(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "."
	}
	return path[:i]
}

func (o *benchOptions) write(rep *bench.Report, stdout io.Writer) error {
	if err := rep.WriteHeadline(stdout); err != nil {
		return err
	}
	if err := rep.WriteMarkdown(stdout); err != nil {
		return err
	}
	if o.jsonOut != "" {
		if err := rep.WriteJSON(o.jsonOut); err != nil {
			return err
		}
	}
	if o.mdOut != "" {
		f, err := os.Create(o.mdOut)
		if err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
		err = errors.Join(rep.WriteHeadline(f), rep.WriteMarkdown(f), f.Close())
		if err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
	}
	if o.plots != "" {
		names, err := bench.WritePlots(rep, o.plots)
		if err != nil {
			return err
		}
		for _, n := range names {
			fmt.Fprintf(stdout, "wrote %s/%s\n", o.plots, n)
		}
	}
	return nil
}

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test sshapi (open loop, latency from the scheduled send) beside OpenSSH and Python peers",
	}
	cmd.AddCommand(newBenchCommandsCmd(), newBenchBurstCmd(), newBenchSessionsCmd(), newBenchPaperCmd(), newBenchReportCmd(), newBenchTransferCmd(), newBenchListingCmd(), newBenchSoakCmd(), newBenchTusCmd(), newBenchClientsCmd())
	return cmd
}

func newBenchCommandsCmd() *cobra.Command {
	var o benchOptions
	var command, rates string
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "commands",
		Short: "Run a command at constant arrival rates and report latency percentiles and errors per rate",
		Example: `  sshapi bench commands --url $SSHAPI_URL --system hpc --command uptime --rates 10,50,90,100,500 --duration 30s
  sshapi bench commands --system hpc --rates 50,90 --compare all --ssh me@hpc:22 --ssh-key ~/.ssh/id_ed25519 \
      --ssh-host-key "$(ssh-keyscan -t ed25519 hpc | cut -d' ' -f2-)" --json out.json --markdown out.md --plots img`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := parseRates(rates)
			if err != nil {
				return err
			}
			if duration <= 0 {
				return errors.New("--duration must be positive")
			}
			return o.measure(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), func(ctx context.Context, r *bench.Runner) error {
				return r.Commands(ctx, command, rs, duration)
			})
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&command, "command", "uptime", "the remote command")
	cmd.Flags().StringVar(&rates, "rates", "10,50,90,100,500", "offered rates in requests/s, comma-separated")
	cmd.Flags().DurationVar(&duration, "duration", 30*time.Second, "scheduling window per rate and target")
	return cmd
}

func newBenchBurstCmd() *cobra.Command {
	var o benchOptions
	var command string
	var n int
	cmd := &cobra.Command{
		Use:   "burst",
		Short: "Send n requests at the same instant and report the time until all are done, and errors",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n <= 0 {
				return errors.New("--n must be positive")
			}
			return o.measure(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), func(ctx context.Context, r *bench.Runner) error {
				return r.Burst(ctx, command, n)
			})
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&command, "command", "uptime", "the remote command")
	cmd.Flags().IntVar(&n, "n", 500, "requests sent at once")
	_ = cmd.Flags().Set("concurrency-cap", "0")
	return cmd
}

func newBenchSessionsCmd() *cobra.Command {
	var o benchOptions
	var n int
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Establish n fresh authenticated SSH connections at once (sshapi: n credential checks, each dials) and report time and failures",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n <= 0 {
				return errors.New("--n must be positive")
			}
			return o.measure(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), func(ctx context.Context, r *bench.Runner) error {
				return r.Sessions(ctx, n)
			})
		},
	}
	o.addFlags(cmd)
	cmd.Flags().IntVar(&n, "n", 200, "connections requested at once")
	return cmd
}

func newBenchPaperCmd() *cobra.Command {
	var o study.Options
	var rates, compare, transferSize, channels, cipherSize, ciphers, clientsPeers string
	cmd := &cobra.Command{
		Use:   "paper",
		Short: "Reproduce the SSH-API study's load test on this machine: throwaway stock sshd + sshapi, sweep, burst, sessions, transfers, ciphers, small files, listing, small requests; writes docs/benchmarks.md and plots (needs root)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Rates, err = parseRates(rates); err != nil {
				return err
			}
			if o.Peers, err = bench.ParsePeers(compare); err != nil {
				return fmt.Errorf("--compare: %w", err)
			}
			if o.Peers == nil {
				o.Peers = []string{}
			}
			if transferSize != "none" {
				if o.TransferSize, err = bench.ParseSize(transferSize); err != nil {
					return fmt.Errorf("--transfer-size: %w", err)
				}
			}
			o.Channels = []int{}
			if channels != "none" {
				if o.Channels, err = bench.ParseStreams(channels); err != nil {
					return fmt.Errorf("--channels: %w", err)
				}
			}
			if err := paperSections(&o, cipherSize, ciphers, clientsPeers); err != nil {
				return err
			}
			o.Progress = cmd.ErrOrStderr()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := study.Run(ctx, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/benchmarks.md, %s/benchmarks.json and %s/img/ (%d runs)\n", o.Out, o.Out, o.Out, len(rep.Runs))
			return rep.WriteHeadline(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", "docs", "directory for benchmarks.md, benchmarks.json and img/")
	f.StringVar(&rates, "rates", "10,50,90,100,500", "offered rates in requests/s")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "scheduling window per rate and target (longer gives steadier tails)")
	f.IntVar(&o.BurstN, "burst", 500, "burst size (-1 skips)")
	f.IntVar(&o.SessionsN, "sessions", 200, "fresh SSH connections at once (-1 skips)")
	f.IntVar(&o.LsFiles, "ls-files", 10000, "files in the directory `ls` lists")
	f.StringVar(&compare, "compare", "all", "peers beside sshapi: all, none, or a list of "+strings.Join(bench.AllPeers, ","))
	f.StringVar(&o.Python, "python", "bench/.venv/bin/python", "Python with the peers' requirements (make bench-deps)")
	f.StringVar(&o.PeersDir, "peers-dir", "bench/peers", "directory of the Python peers")
	f.StringVar(&o.SSHDConfig, "sshd-config", "", "extra sshd_config lines, e.g. 'MaxStartups 3000' (default: stock limits)")
	f.IntVar(&o.MaxInFlight, "concurrency-cap", 256, "most requests in flight per run")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Second, "per-request timeout")
	f.DurationVar(&o.Drain, "drain", 5*time.Second, "how long stragglers may finish after a rate's window")
	f.StringVar(&transferSize, "transfer-size", "256MiB", "file size of the transfer section (loopback and 1 Gbit/s × 50 ms, beside sftp and scp -3) and of the resumable-upload section (tus beside curl PUT, last); 1GiB for the full run, none skips both")
	f.StringVar(&channels, "channels", "1,2,4,8,auto", "SFTP channel counts of the transfer section's API downloads and uploads at 1 Gbit/s × 50 ms; none skips")
	f.IntVar(&o.ListEntries, "list-entries", 10_000, "entries of the directory the listing section lists through the API and OpenSSH at 1 and 50 at once (-1 skips)")
	f.StringVar(&cipherSize, "cipher-size", "256MiB", "file size of the per-cipher section (API upload and download beside sftp -c, loopback and 1 Gbit/s × 50 ms, CPU per GiB); none skips")
	f.StringVar(&ciphers, "ciphers", strings.Join(study.PaperCiphers, ","), "SSH ciphers of the per-cipher section; none skips")
	f.IntVar(&o.SmallFiles, "small-files", 100_000, "4 KiB files the many-small-files section copies system to system (POST /v1/transfers beside a tar pipe and scp -3 -r; -1 skips)")
	f.IntVar(&o.Clients, "clients", 50, "clients of the small-requests section (checksum of an 8-byte file, uptime and a 10-entry ls, beside --clients-peers; -1 skips)")
	f.DurationVar(&o.ClientsDuration, "clients-duration", 10*time.Second, "length of each run of the small-requests section")
	f.StringVar(&clientsPeers, "clients-peers", bench.PeerAsyncSSH, "pooled peers of the small-requests section: none or a list of "+strings.Join(bench.AllPeers, ","))
	return cmd
}

// paperSections reads the flags of bench paper's per-cipher and small-requests sections.
func paperSections(o *study.Options, cipherSize, ciphers, clientsPeers string) error {
	var err error
	if cipherSize != "none" {
		if o.CipherSize, err = bench.ParseSize(cipherSize); err != nil {
			return fmt.Errorf("--cipher-size: %w", err)
		}
	}
	o.Ciphers = []string{}
	if ciphers != "none" {
		for _, c := range strings.Split(ciphers, ",") {
			if c = strings.TrimSpace(c); c != "" {
				o.Ciphers = append(o.Ciphers, c)
			}
		}
	}
	if o.ClientsPeers, err = bench.ParsePeers(clientsPeers); err != nil {
		return fmt.Errorf("--clients-peers: %w", err)
	}
	if o.ClientsDuration <= 0 {
		return errors.New("--clients-duration must be positive")
	}
	return nil
}

func newBenchTransferCmd() *cobra.Command {
	var o study.TransferOptions
	var url, token, system, remoteDir, size, streams, conns, rate, jsonOut, mdOut, plots, ciphers, channels string
	var rtt time.Duration
	var quiet bool
	cmd := &cobra.Command{
		Use:   "transfer",
		Short: "Measure upload, download and system-to-system transfer throughput and CPU per stream count, beside OpenSSH sftp and scp -3 (self-hosted unless --url)",
		Example: `  sshapi bench transfer --size 1GiB --streams 1,2,4,8,auto --compare --connections 1,2,4,8
  sshapi bench transfer --size 256MiB --rtt 50ms --rate 1gbit --compare --json t.json --markdown t.md --plots img
  sshapi bench transfer --url $SSHAPI_URL --system hpc --remote-dir /scratch/me --size 1GiB
  sshapi bench transfer --size 256MiB --compare --ciphers aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes256-ctr
  sshapi bench transfer --size 256MiB --rtt 50ms --rate 1gbit --channels 1,2,4,8,auto --compare
  sshapi bench transfer --size 1GiB --streams auto --s3 --compare`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Size, err = bench.ParseSize(size); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			if o.Streams, err = bench.ParseStreams(streams); err != nil {
				return fmt.Errorf("--streams: %w", err)
			}
			if o.Connections, err = bench.ParseStreams(conns); err != nil || slices.Contains(o.Connections, 0) {
				return fmt.Errorf("--connections: want counts 1-64: %w", err)
			}
			for _, c := range strings.Split(ciphers, ",") {
				if c = strings.TrimSpace(c); c != "" {
					o.Ciphers = append(o.Ciphers, c)
				}
			}
			if o.S3 && (url != "" || len(o.Ciphers) > 0 || channels != "") {
				return errors.New("--s3 runs beside the default runs of the self-hosted bench: not with --url, --ciphers or --channels")
			}
			if len(o.Ciphers) > 0 && url != "" {
				return errors.New("--ciphers registers its own systems: it needs the self-hosted bench, not --url")
			}
			if channels != "" {
				if o.Channels, err = bench.ParseStreams(channels); err != nil {
					return fmt.Errorf("--channels: %w", err)
				}
				switch {
				case url != "":
					return errors.New("--channels starts an sshapi per channel count: it needs the self-hosted bench, not --url")
				case len(o.Ciphers) > 0:
					return errors.New("--channels and --ciphers each replace the other runs: give one")
				}
			}
			path := study.TransferPath{RTT: rtt}
			if rate != "" {
				if path.Rate, err = wanem.ParseRate(rate); err != nil {
					return fmt.Errorf("--rate: %w", err)
				}
			}
			o.Paths = []study.TransferPath{path}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var rep *bench.TransferReport
			if url != "" {
				rep, err = remoteTransfer(ctx, url, token, system, remoteDir, o)
			} else {
				rep, err = study.RunTransfer(ctx, o)
			}
			if rep == nil || len(rep.Runs) == 0 {
				return err
			}
			return errors.Join(err, writeTransfer(rep, cmd.OutOrStdout(), jsonOut, mdOut, plots))
		},
	}
	f := cmd.Flags()
	f.StringVar(&url, "url", "", "measure this running sshapi (upload and download only) instead of a self-hosted one")
	f.StringVar(&token, "token", "", "bearer token with --url (default $SSHAPI_TOKEN)")
	f.StringVar(&system, "system", "", "system id with --url")
	f.StringVar(&remoteDir, "remote-dir", "/tmp", "absolute directory on --system in which a directory of this run's own (sshapi-bench-<pid>-<random>) holds the test file; removed at the end")
	f.StringVar(&size, "size", "256MiB", "file size (KiB, MiB, GiB)")
	f.StringVar(&streams, "streams", "1,4,8,auto", "system-to-system stream counts (auto = sshapi chooses)")
	f.StringVar(&conns, "connections", "", "scaling runs: n parallel sftp gets over n connections vs one transfer with n streams, e.g. 1,2,4,8,16,20")
	f.DurationVar(&rtt, "rtt", 0, "emulated round-trip time (a wanem proxy in front of each system)")
	f.StringVar(&rate, "rate", "", "emulated bandwidth per direction, e.g. 1gbit")
	f.BoolVar(&o.Compare, "compare", false, "measure OpenSSH sftp put/get and scp -3 beside sshapi")
	f.StringVar(&ciphers, "ciphers", "", "instead of the runs above, upload and download once per SSH cipher (comma-separated), sshapi limited to it beside OpenSSH sftp -c with --compare")
	f.StringVar(&channels, "channels", "", "instead of the runs above, upload and download once per SFTP channel count (e.g. 1,2,4,8,auto), each through a fresh sshapi set to that count, beside sftp put/get with --compare")
	f.StringVar(&o.Verify, "verify", "sha256", "system-to-system verification: none, size, sha256")
	f.BoolVar(&o.S3, "s3", false, "also transfer the file from the sshd to an S3 bucket (a throwaway versitygw on the same path) and back, and bucket to bucket (a server-side copy), beside rclone copyto with --compare")
	f.StringVar(&jsonOut, "json", "", "write the runs to this JSON file")
	f.StringVar(&mdOut, "markdown", "", "write the Markdown tables to this file")
	f.StringVar(&plots, "plots", "", "write transfer-streams.png (or transfer-channels.png) into this directory")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return cmd
}

// remoteTransfer measures upload and download of a random file against a running sshapi.
func remoteTransfer(ctx context.Context, url, token, system, remoteDir string, o study.TransferOptions) (*bench.TransferReport, error) {
	if token == "" {
		token = os.Getenv("SSHAPI_TOKEN")
	}
	if token == "" || system == "" {
		return nil, errors.New("--url needs --token (or SSHAPI_TOKEN) and --system")
	}
	f, err := os.CreateTemp("", "sshapi-transfer-*.bin")
	if err != nil {
		return nil, fmt.Errorf("temp file: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = io.CopyN(f, rand.Reader, o.Size)
	if err = errors.Join(err, f.Close()); err != nil {
		return nil, fmt.Errorf("temp file: %w", err)
	}
	rep := &bench.TransferReport{Meta: study.Machine(ctx)}
	rep.Meta.Started, rep.Meta.Runs = time.Now(), 1
	tb := &bench.TransferBench{API: &bench.API{BaseURL: url, Token: token}, Path: url, Src: bench.TransferEndpoint{System: system},
		Local: f.Name(), Size: o.Size, RemoteDir: remoteDir, Progress: o.Progress, Report: rep}
	removeDir, err := tb.OpenRunDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("--remote-dir: %w", err)
	}
	err = tb.Run(ctx, nil, nil)
	// The run's directory goes also after an interrupt, which canceled ctx.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return rep, errors.Join(err, removeDir(cctx))
}

// tables is a bench report that renders Markdown tables and saves itself as JSON.
type tables interface {
	WriteMarkdown(w io.Writer) error
	WriteJSON(path string) error
}

// writeTables writes rep's tables to stdout and, when asked, to the JSON and Markdown files.
func writeTables(rep tables, stdout io.Writer, jsonOut, mdOut string) error {
	if err := rep.WriteMarkdown(stdout); err != nil {
		return err
	}
	if jsonOut != "" {
		if err := rep.WriteJSON(jsonOut); err != nil {
			return err
		}
	}
	if mdOut != "" {
		f, err := os.Create(mdOut)
		if err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
		if err := errors.Join(rep.WriteMarkdown(f), f.Close()); err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
	}
	return nil
}

func writeTransfer(rep *bench.TransferReport, stdout io.Writer, jsonOut, mdOut, plots string) error {
	if err := writeTables(rep, stdout, jsonOut, mdOut); err != nil {
		return err
	}
	if plots != "" {
		names, err := rep.WritePlots(plots)
		if err != nil {
			return err
		}
		for _, n := range names {
			fmt.Fprintf(stdout, "wrote %s/%s\n", plots, n)
		}
	}
	return nil
}

func newBenchReportCmd() *cobra.Command {
	var o benchOptions
	var in string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Re-render Markdown tables and plots from a --json file",
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := bench.ReadJSON(in)
			if err != nil {
				return err
			}
			o.jsonOut = ""
			return o.write(rep, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&in, "json", "", "a report written by --json")
	cmd.Flags().StringVar(&o.mdOut, "markdown", "", "write Markdown tables to this file")
	cmd.Flags().StringVar(&o.plots, "plots", "", "write PNG figures into this directory")
	_ = cmd.MarkFlagRequired("json")
	return cmd
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("--rates: %q is not a positive number", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("--rates: give at least one rate")
	}
	return out, nil
}
