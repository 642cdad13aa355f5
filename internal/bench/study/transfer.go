package study

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
	"github.com/sshapi/sshapi/internal/service"
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
	// Channels, when set (and Ciphers is not), replaces the runs above by an upload and a
	// download per SFTP channel count (0 = sshapi's automatic choice), each through a fresh
	// sshapi configured for that count, beside one `sftp` put and get with Compare.
	Channels []int
	// S3 adds, beside the runs above, transfers of the file from the sshd to an S3 bucket and
	// back through sshapi (a throwaway versitygw reached over the same path), and with Compare
	// `rclone copyto` between an sftp and an s3 remote on the same servers.
	S3 bool
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Profiles, when set, is a directory that receives a CPU profile of the bench process per
	// sshapi run (bench.TransferBench.Profiles).
	Profiles string
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
// o.Compare is set. With o.Ciphers or o.Channels it measures uploads and downloads per cipher or
// per channel count instead.
func RunTransfer(ctx context.Context, o TransferOptions) (*bench.TransferReport, error) {
	o.defaults()
	settled := settle(ctx)
	loadStart := loadAverage()
	l, err := startLab(ctx, "")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	base, err := envConfig()
	if err != nil {
		return nil, err
	}
	api, stop, err := l.service(ctx, "data", base, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	remoteDir, err := l.userDir("bench-transfer")
	if err != nil {
		return nil, err
	}
	local := filepath.Join(l.tmp, "src.bin")
	if err := randomFile(local, o.Size); err != nil {
		return nil, err
	}

	var s3l *s3Lab
	if o.S3 {
		if s3l, err = l.startS3(ctx); err != nil {
			return nil, err
		}
		defer s3l.Close()
	}

	rep := &bench.TransferReport{Meta: Machine(ctx)}
	rep.Meta.Started = time.Now()
	rep.Meta.Runs = 1
	rep.Meta.SSHD = "OpenSSH sshd on 127.0.0.1, stock configuration; both systems of a system-to-system transfer are this sshd, registered twice"
	rep.Meta.Versions = map[string]map[string]string{"sshapi": {"sshapi": service.Version}}
	tmpl := bench.TransferBench{API: api, Local: local, Size: o.Size, RemoteDir: remoteDir, Verify: o.Verify, Peers: o.Compare,
		SSHDPIDs: l.sshdPIDs(), Progress: o.Progress, Report: rep, Profiles: o.Profiles, Remove: func(p string) error { return os.Remove(p) }}
	for i, path := range o.Paths {
		ends := &pathEnds{lab: l, path: path}
		tb := tmpl
		tb.Path, tb.LinkMBps = path.Name(), float64(path.Rate)/1e6
		switch {
		case len(o.Ciphers) > 0:
			err = runCiphers(ctx, o, func(c, suffix string) (bench.TransferEndpoint, error) {
				id := fmt.Sprintf("xfer%d-%s%s", i, strings.NewReplacer("@", "_", "+", "_").Replace(c), suffix)
				return ends.system(ctx, api, id, map[string]any{"ciphers": []string{c}})
			}, ends.emulated(), &tb)
		case len(o.Channels) > 0:
			err = runChannels(ctx, l, base, o.Channels, fmt.Sprintf("xfer%d", i), ends, &tb)
		default:
			err = runStreams(ctx, o, fmt.Sprintf("xfer%d", i), api, ends, &tb)
			if err == nil && s3l != nil {
				var ep bench.S3Endpoint
				if ep, err = ends.s3System(ctx, api, s3l, fmt.Sprintf("xfer%d-s3", i)); err == nil {
					err = tb.RunS3(ctx, ep)
				}
			}
		}
		ends.close()
		if err != nil {
			return rep, err
		}
	}
	rep.Meta.Notes = append(transferNotes(o), fmt.Sprintf("1-minute load average when the transfer runs started: %s; when they ended: %s", loadStart, loadAverage()), settled)
	return rep, nil
}

// uploadDigestNote says what an upload and a download through sshapi verify by default.
const uploadDigestNote = "an upload through sshapi hashes its body with SHA-256 as it streams and answers with the digest (nothing is read back); a download hashes nothing; `sftp` hashes nothing either way"

// transferNotes say how a transfer bench with o measured: the notes of the runs o asks for.
func transferNotes(o TransferOptions) []string {
	notes := []string{
		fmt.Sprintf("a %d MiB file of random bytes, once per point; MB/s is 10^6 bytes per second of wall time: one HTTP request for upload and download (sshapi streams the body through SFTP on a pooled connection), submit to `succeeded` for a system-to-system transfer (`POST /v1/transfers`, polled every 20 ms), process start to exit for OpenSSH", o.Size>>20),
	}
	switch {
	case len(o.Ciphers) > 0:
		notes = append(notes, uploadDigestNote,
			"each upload is measured twice: by default, then once more with `digest=none` (the same bytes unhashed, as `sftp put` sends them; on the system the default upload has just used, so from a warm pool)",
			"with a cipher: sshapi's system is registered with `ciphers: [that cipher]` (golang.org/x/crypto/ssh), OpenSSH runs `sftp -c` that cipher (OpenSSH's own implementation, usually OpenSSL's AES-NI code); the MAC is each side's default for the cipher (none for the AEAD ciphers)")
	case len(o.Channels) > 0:
		notes = append(notes, uploadDigestNote, channelsNote)
	default:
		notes = append(notes, "system-to-system transfers verify with "+o.Verify+" on both systems before they succeed (scp -3 verifies nothing); "+uploadDigestNote)
		if o.S3 {
			notes = append(notes, s3Note)
		}
	}
	return append(notes,
		"OpenSSH peers: `sftp -b -` put / get to /dev/null, and `scp -3` relaying through this host, each a fresh process and connection over the same path (the same wanem proxies) as sshapi",
		"CPU: user+system seconds of the bench process (which hosts sshapi; less its thread that samples sshd, whose own CPU is measured and taken off) plus its waited-for children (the OpenSSH clients), and of the sshd process tree (sessions and sftp-server), sampled from /proc every 100 ms, each process with the children it waited for (so processes shorter than that count too)")
}

// channelsNote says how the channel runs measured.
const channelsNote = "per channel count: a fresh in-process sshapi for each count n with `http.stripe_max_channels: n` and striping forced (`stripe_min_rtt` 1 ns, an unbounded assumed link rate, `stripe_min_bytes` 1), so every upload and download uses n SFTP channels when the download budget and the pool allow; `auto` is sshapi's defaults (channels from the measured RTT, at most 8; none below 5 ms); the channels used are read from the service's log"

// s3Note says how the S3 runs measured.
const s3Note = "S3 (with --s3): a throwaway versitygw (posix backend on this machine's disk) reached over the same path as the sshd; sshapi moves the file with `POST /v1/transfers` between the sshd's system and the bucket's system, verified by SHA-256 end to end; rclone (Debian's) runs `rclone copyto` between an sftp remote (the same key and sshd) and an s3 remote (provider Other, path-style) with its defaults, checking size and MD5 only"

// runStreams registers two systems on the path (prefix-a, prefix-b) and measures upload,
// download, system-to-system transfers per stream count and the connection scaling.
func runStreams(ctx context.Context, o TransferOptions, prefix string, api *bench.API, ends *pathEnds, tb *bench.TransferBench) error {
	src, err := ends.system(ctx, api, prefix+"-a", nil)
	if err != nil {
		return err
	}
	dst, err := ends.system(ctx, api, prefix+"-b", nil)
	if err != nil {
		return err
	}
	tb.Src, tb.Dst = src, dst
	if ends.emulated() {
		tb.Warm = func(ctx context.Context) (bench.TransferEndpoint, error) {
			return ends.system(ctx, api, prefix+"-warm", nil)
		}
	}
	return tb.Run(ctx, o.Streams, o.Connections)
}

// pathEnds opens ways to the lab's sshd over one path: on loopback the sshd itself, otherwise a
// wanem proxy per system (each a link of its own). close stops the proxies.
type pathEnds struct {
	lab   *lab
	path  TransferPath
	stops []func()
}

// open returns the address of a new way to the sshd and OpenSSH key files for it (in the
// scratch directory name).
func (p *pathEnds) open(ctx context.Context, name string) (bench.SSHEndpoint, error) {
	host, port, err := p.way(ctx, p.lab.srv.Addr)
	if err != nil {
		return bench.SSHEndpoint{}, err
	}
	return p.lab.sshEndpoint(name, host, port)
}

// way returns an address that reaches upstream (host:port) over the path: upstream itself on
// loopback, otherwise a new wanem proxy in front of it (a link of its own).
func (p *pathEnds) way(ctx context.Context, upstream string) (string, int, error) {
	if p.path.RTT == 0 && p.path.Rate == 0 {
		host, port, err := net.SplitHostPort(upstream)
		if err != nil {
			return "", 0, err
		}
		n, err := strconv.Atoi(port)
		return host, n, err
	}
	w, err := wanem.New(wanem.Config{Listen: "127.0.0.1:0", Upstream: upstream, RTT: p.path.RTT, Rate: p.path.Rate})
	if err != nil {
		return "", 0, fmt.Errorf("wanem: %w", err)
	}
	if err := w.Start(ctx); err != nil {
		return "", 0, fmt.Errorf("wanem: %w", err)
	}
	p.stops = append(p.stops, func() { _ = w.Stop() })
	a := w.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port, nil
}

// system opens a way to the sshd and registers it with api as system id (with fields).
func (p *pathEnds) system(ctx context.Context, api *bench.API, id string, fields map[string]any) (bench.TransferEndpoint, error) {
	ep, err := p.open(ctx, id)
	if err != nil {
		return bench.TransferEndpoint{}, err
	}
	if err := p.lab.register(ctx, api, id, ep.Host, ep.Port, fields); err != nil {
		return bench.TransferEndpoint{}, err
	}
	return bench.TransferEndpoint{System: id, SSH: ep}, nil
}

// emulated reports whether the path is a wanem proxy's (not loopback): the uploads there are
// measured from a warm pool too (bench.TransferBench.Warm).
func (p *pathEnds) emulated() bool { return p.path.RTT != 0 || p.path.Rate != 0 }

func (p *pathEnds) close() {
	for _, s := range p.stops {
		s()
	}
	p.stops = nil
}

// runCiphers measures upload and download once per cipher in o.Ciphers on one path: endpoint
// registers a system limited to the cipher (its id ending in suffix), and tmpl (its API, path,
// file and report) is copied for each. With warm the upload is measured from a warm pool too,
// on a second such system. Each upload is measured a second time with digest=none.
func runCiphers(ctx context.Context, o TransferOptions, endpoint func(cipher, suffix string) (bench.TransferEndpoint, error), warm bool, tmpl *bench.TransferBench) error {
	for _, c := range o.Ciphers {
		ep, err := endpoint(c, "")
		if err != nil {
			return err
		}
		tb := *tmpl
		tb.Src, tb.Cipher, tb.NoDigest = ep, c, true
		if warm {
			tb.Warm = func(context.Context) (bench.TransferEndpoint, error) { return endpoint(c, "-warm") }
		}
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

// TransferSection writes the transfer report's tables and figure into a Markdown document.
func TransferSection(w io.Writer, r *bench.TransferReport, imgs []string) error {
	if r == nil || len(r.Runs) == 0 {
		return nil
	}
	var figs strings.Builder
	for _, img := range imgs {
		alt, caption := "File transfer throughput per stream count", "sshapi system-to-system MB/s per stream count used, scp -3 as a flat line"
		if strings.Contains(img, "channels") {
			alt, caption = "API download and upload throughput per SFTP channel count", "sshapi's downloads and uploads through the HTTP API per SFTP channel count, OpenSSH sftp get and put and the emulated link as flat lines"
		}
		fmt.Fprintf(&figs, "![%s](img/%s)\n\n*%s.*\n\n", alt, img, caption)
	}
	return writeSection(w, "File transfers", "Throughput of moving one file through sshapi's HTTP API (upload, download, and a system-to-system transfer with n SFTP streams) beside OpenSSH's own clients over the same path, and between the sshd and an S3 bucket beside rclone. \"sshapi ÷ peer\" is sshapi's MB/s divided by the peer's on the same path (OpenSSH's client, or rclone for `sftp-to-s3` and `s3-to-sftp`; above 1 means sshapi is faster). The last table sets the SFTP channels one download or upload through the API may stripe over (`http.stripe_max_channels`) on the long path, each count a fresh sshapi, against the emulated link's rate and OpenSSH `sftp` of the same file.",
		r.Meta.Notes, r.WriteMarkdown, figs.String())
}

// PaperTransferOptions are the transfer runs of `bench paper`: a file of size bytes
// on loopback and through 1 Gbit/s × 50 ms wanem proxies, one stream, 4, 8 and automatic,
// beside OpenSSH sftp and scp -3, the scaling runs at 1, 2, 4 and 8 connections, and SFTP→S3
// and S3→SFTP beside rclone.
func PaperTransferOptions(size int64, progress io.Writer) TransferOptions {
	return TransferOptions{Size: size, Streams: []int{1, 4, 8, 0}, Connections: []int{1, 2, 4, 8}, Compare: true, S3: true, Progress: progress,
		Paths: []TransferPath{{}, {RTT: 50 * time.Millisecond, Rate: 125_000_000}}}
}

// PaperChannelOptions are the channel runs of `bench paper`: API downloads and uploads of a
// file of size bytes through 1 Gbit/s × 50 ms wanem proxies at each channel count, beside
// OpenSSH sftp get and put.
func PaperChannelOptions(size int64, counts []int, progress io.Writer) TransferOptions {
	return TransferOptions{Size: size, Channels: counts, Compare: true, Progress: progress,
		Paths: []TransferPath{{RTT: 50 * time.Millisecond, Rate: 125_000_000}}}
}
