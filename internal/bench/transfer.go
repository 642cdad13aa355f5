package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transfer scenarios.
const (
	TransferUpload      = "upload"
	TransferDownload    = "download"
	TransferSystem      = "system-to-system"
	TransferConnections = "connections"
	// TransferUploadChannels and TransferDownloadChannels are uploads and downloads through the
	// HTTP API with sshapi limited to a number of SFTP channels per transfer (striping), beside
	// OpenSSH sftp put and get.
	TransferUploadChannels   = "upload-channels"
	TransferDownloadChannels = "download-channels"
)

// Transfer targets beside sshapi.
const (
	PeerSFTP = "openssh-sftp"
	PeerSCP3 = "openssh-scp-3"
)

// TransferRun is one measured file movement.
type TransferRun struct {
	// Path names the network path ("loopback", "1gbit × 50ms").
	Path string `json:"path"`
	// Scenario is upload, download, system-to-system or connections.
	Scenario string `json:"scenario"`
	// Cipher is the one SSH cipher both sshapi (the system's ciphers list) and OpenSSH (-c)
	// were limited to; empty when each used its default.
	Cipher string `json:"cipher,omitempty"`
	// Target is sshapi or a peer.
	Target string `json:"target"`
	// Streams is what was asked for (0 = automatic; for connections the number of parallel
	// connections or streams; for the channels scenarios the SFTP channels per transfer);
	// StreamsUsed what sshapi chose.
	Streams     int `json:"streams"`
	StreamsUsed int `json:"streams_used"`
	// LinkMBps is the emulated link's rate in 10^6 bytes/s per direction (0: not limited).
	LinkMBps float64 `json:"link_mb_per_s,omitempty"`
	// Bytes moved in Seconds (aggregate over all connections for the connections scenario).
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
	// CPUSeconds is the user+system CPU of the bench process and its waited-for children (the
	// in-process sshapi service, the OpenSSH clients); SSHDCPUSeconds that of the sshd process
	// tree, sampled from /proc every 100 ms with the children each process waited for (see
	// cpuMeter).
	CPUSeconds     float64 `json:"cpu_s"`
	SSHDCPUSeconds float64 `json:"sshd_cpu_s,omitempty"`
	// ChildCPUSeconds is the part of CPUSeconds spent by the waited-for children alone (the
	// OpenSSH clients); the rest is the bench process's own (sshapi, the HTTP client, and on an
	// emulated path the in-process wanem proxies).
	ChildCPUSeconds float64 `json:"child_cpu_s,omitempty"`
	// Pool, for sshapi's uploads when a warm one was measured too (TransferBench.Warm), is the
	// state of sshapi's connection pool for the system when the upload started: "cold" (no
	// connection yet: the upload waits for a dial) or "warm" (one connection, opened by a
	// listing just before, as a web browser lists a directory before uploading into it).
	Pool string `json:"pool,omitempty"`
	// Digest is "none" for an sshapi upload asked not to hash its body (digest=none, see
	// TransferBench.NoDigest); empty for the default, which hashes it with SHA-256 as it
	// streams and answers with the digest.
	Digest string `json:"digest,omitempty"`
	// Error is why the run failed ("" if it did not).
	Error string `json:"error,omitempty"`
}

// DigestNone is TransferRun.Digest of an upload asked for no digest.
const DigestNone = "none"

// Pool states of TransferRun.Pool.
const (
	PoolCold = "cold"
	PoolWarm = "warm"
)

// TransferReport is everything one transfer bench measured.
type TransferReport struct {
	Meta Meta          `json:"meta"`
	Runs []TransferRun `json:"runs"`
}

// TransferEndpoint is one way to reach a system: its sshapi id and, for the OpenSSH peers, its
// address (which may be a wanem proxy in front of the sshd).
type TransferEndpoint struct {
	System string
	SSH    SSHEndpoint
}

// TransferBench measures file movement through sshapi's HTTP API and through OpenSSH on one path.
type TransferBench struct {
	// API is sshapi.
	API *API
	// Path names the network path in the report.
	Path string
	// Src is the system uploads and downloads go to and transfers start from; Dst (optional) is
	// where system-to-system transfers go.
	Src, Dst TransferEndpoint
	// Local is a local file of Size bytes; RemoteDir an absolute directory on the systems that
	// the remote user may write.
	Local     string
	Size      int64
	RemoteDir string
	// Verify is the transfers' verification (default sha256).
	Verify string
	// Peers enables the OpenSSH sftp and scp -3 runs (they need Src.SSH and Dst.SSH).
	Peers bool
	// SSHDPIDs are the sshd master processes whose CPU is reported.
	SSHDPIDs []int
	// Cipher, when set, is the only cipher Src was registered with; the OpenSSH peers get
	// `-c Cipher` and every run records it.
	Cipher string
	// Remove deletes a remote file before it is written again (nil: uploads overwrite and
	// system-to-system transfers are skipped when it is needed).
	Remove func(path string) error
	// LinkMBps is the path's emulated rate in 10^6 bytes/s (0: not limited), for the report.
	LinkMBps float64
	// Warm, when set, returns a further system on the same path (a link of its own), registered
	// and not used yet: after the upload to Src (recorded as Pool "cold"), RunUpDown lists
	// RemoteDir on it, unmeasured, and measures the same upload to it (Pool "warm").
	Warm func(ctx context.Context) (TransferEndpoint, error)
	// NoDigest, when set, has RunUpDown measure sshapi's upload once more, with digest=none
	// (Digest "none"), right after the default one and to the same system (so from a warm
	// pool): the same bytes without the SHA-256 that every upload computes by default and
	// OpenSSH's sftp does not.
	NoDigest bool
	// Progress receives a line per run (nil = quiet).
	Progress io.Writer
	// Report receives the runs.
	Report *TransferReport
	// Profiles, when set, is a directory that receives a CPU profile of the bench process (which
	// hosts sshapi) for each sshapi run, named after its path, scenario and cipher (see
	// profileName). A run during which another CPU profile is under way gets none.
	Profiles string
}

func (b *TransferBench) remote(name string) string {
	return strings.TrimRight(b.RemoteDir, "/") + "/" + name
}

// measure times fn, with CPU of this process tree and of sshd, and records the run.
func (b *TransferBench) measure(scenario, target string, streams int, bytes int64, fn func() (int, error)) TransferRun {
	return b.measurePool(scenario, "", "", target, streams, bytes, fn)
}

// measurePool is measure for a run whose pool state (TransferRun.Pool) is pool and whose
// digest (TransferRun.Digest) is digest.
func (b *TransferBench) measurePool(scenario, pool, digest, target string, streams int, bytes int64, fn func() (int, error)) TransferRun {
	stopProfile := b.startProfile(scenario+digestLabel(digest)+poolLabel(pool), target, streams)
	defer stopProfile()
	own0, child0 := splitCPU()
	var meter *cpuMeter
	if len(b.SSHDPIDs) > 0 {
		meter = startCPUMeter(b.SSHDPIDs)
	}
	start := time.Now()
	used, err := fn()
	el := time.Since(start).Seconds()
	var sshd float64
	if meter != nil {
		sshd = meter.Stop()
	}
	own1, child1 := splitCPU()
	r := TransferRun{Path: b.Path, Scenario: scenario, Cipher: b.Cipher, Target: target, Streams: streams, StreamsUsed: used, Bytes: bytes,
		Seconds: el, CPUSeconds: own1 + child1 - own0 - child0 - meter.Own(), ChildCPUSeconds: child1 - child0, SSHDCPUSeconds: sshd, LinkMBps: b.LinkMBps, Pool: pool, Digest: digest}
	if err != nil {
		r.Error = err.Error()
	} else if el > 0 {
		r.MBps = float64(bytes) / 1e6 / el
	}
	if b.Progress != nil {
		fmt.Fprintf(b.Progress, "transfer %s %s%s%s%s %s streams=%d: %.1f MB/s in %.2fs, cpu %.2fs, sshd cpu %.2fs %s\n",
			b.Path, scenario, digestLabel(digest), poolLabel(pool), cipherLabel(b.Cipher), target, streams, r.MBps, el, r.CPUSeconds, r.SSHDCPUSeconds, r.Error)
	}
	b.Report.Runs = append(b.Report.Runs, r)
	return r
}

// startProfile starts the CPU profile of an sshapi run of scenario (with its digest and pool
// labels, so that each run has a file of its own) into Profiles and returns what stops it (a
// no-op without Profiles, for a peer's run, or when the profile cannot start).
func (b *TransferBench) startProfile(scenario, target string, streams int) func() {
	if b.Profiles == "" || target != BaselineTarget {
		return func() {}
	}
	return startCPUProfile(filepath.Join(b.Profiles, profileName(b.Path, scenario, b.Cipher, streams)))
}

// startCPUProfile starts a CPU profile of this process into the file path and returns what
// stops it (a no-op when the profile cannot start, e.g. while another one is under way).
func startCPUProfile(path string) func() {
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// profileName is the file name of a run's CPU profile: its path, scenario, cipher and stream
// count, reduced to letters, digits, '-' and '.'.
func profileName(path, scenario, cipher string, streams int) string {
	name := fmt.Sprintf("%s-%s-%s-%d", path, scenario, cipher, streams)
	name = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, name)
	return name + ".pprof"
}

// Run measures upload and download, then system-to-system transfers at each stream count (0 =
// automatic), then, with Peers, OpenSSH beside each, then the connection scaling for each n in
// connections. A failed run is recorded with its error; Run returns only ctx's error.
func (b *TransferBench) Run(ctx context.Context, streams, connections []int) error {
	if b.Verify == "" {
		b.Verify = "sha256"
	}
	if err := b.RunUpDown(ctx); err != nil {
		return err
	}
	if b.Dst.System == "" || b.Remove == nil {
		return nil
	}
	src, dst := b.remote("bench-src.bin"), b.remote("bench-dst.bin")
	for _, n := range streams {
		_ = b.Remove(dst)
		b.measure(TransferSystem, BaselineTarget, n, b.Size, func() (int, error) { return b.transfer(ctx, src, dst, n) })
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if b.Peers {
		_ = b.Remove(dst)
		b.measure(TransferSystem, PeerSCP3, 1, b.Size, func() (int, error) { return 1, b.scp3(ctx, src, dst) })
	}
	for _, n := range connections {
		if b.Peers {
			b.measure(TransferConnections, PeerSFTP, n, int64(n)*b.Size, func() (int, error) { return n, b.parallelGet(ctx, src, n) })
		}
		_ = b.Remove(dst)
		b.measure(TransferConnections, BaselineTarget, n, b.Size, func() (int, error) { return b.transfer(ctx, src, dst, n) })
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	_ = b.Remove(dst)
	return ctx.Err()
}

// RunUpDown measures one upload and one download through sshapi and, with Peers, OpenSSH sftp
// put and get beside each. A failed run is recorded with its error; RunUpDown returns only ctx's
// error.
func (b *TransferBench) RunUpDown(ctx context.Context) error {
	return b.upDown(ctx, TransferUpload, TransferDownload, 1, nil, true, b.Peers)
}

// RunChannels measures one upload and one download through sshapi, which the caller configured
// for channels SFTP channels per transfer (0 = its automatic choice); used, called after each,
// tells how many it used. A failed run is recorded with its error; RunChannels returns only
// ctx's error.
func (b *TransferBench) RunChannels(ctx context.Context, channels int, used func() int) error {
	return b.upDown(ctx, TransferUploadChannels, TransferDownloadChannels, channels, used, true, false)
}

// RunChannelPeers measures OpenSSH sftp put and get of the same file, the runs the channel
// counts of RunChannels are compared with.
func (b *TransferBench) RunChannelPeers(ctx context.Context) error {
	return b.upDown(ctx, TransferUploadChannels, TransferDownloadChannels, 1, nil, false, true)
}

// upDown uploads then downloads the file through sshapi (recorded as streams, with used's
// answer as the streams used) and, with peers, through OpenSSH sftp beside each.
func (b *TransferBench) upDown(ctx context.Context, up, down string, streams int, used func() int, sshapi, peers bool) error {
	if used == nil {
		used = func() int { return 1 }
	}
	src := b.remote("bench-src.bin")
	if sshapi {
		warm := up == TransferUpload && b.Warm != nil
		pool := ""
		if warm {
			pool = PoolCold
		}
		b.measurePool(up, pool, "", BaselineTarget, streams, b.Size, func() (int, error) { err := b.upload(ctx, b.Src.System, src, ""); return used(), err })
		if warm {
			b.measureWarm(ctx, streams, used)
		}
		if b.NoDigest && up == TransferUpload {
			b.measurePool(up, PoolWarm, DigestNone, BaselineTarget, streams, b.Size, func() (int, error) {
				err := b.upload(ctx, b.Src.System, src, DigestNone)
				return used(), err
			})
		}
	}
	if peers {
		b.measure(up, PeerSFTP, 1, b.Size, func() (int, error) {
			return 1, b.sftp(ctx, b.Src.SSH, fmt.Sprintf("put %s %s\n", b.Local, b.remote("bench-sftp.bin")))
		})
	}
	if sshapi {
		b.measure(down, BaselineTarget, streams, b.Size, func() (int, error) { err := b.download(ctx, src); return used(), err })
	}
	if peers {
		b.measure(down, PeerSFTP, 1, b.Size, func() (int, error) {
			return 1, b.sftp(ctx, b.Src.SSH, fmt.Sprintf("get %s /dev/null\n", src))
		})
	}
	return ctx.Err()
}

// poolLabel names a pool state in the progress lines and tables ("" for none).
func poolLabel(pool string) string {
	if pool == "" {
		return ""
	}
	return " (" + pool + " pool)"
}

// digestLabel names an upload's digest in the progress lines and tables ("" for the default).
func digestLabel(d string) string {
	if d == "" {
		return ""
	}
	return ", digest=" + d
}

func cipherLabel(c string) string {
	if c == "" {
		return ""
	}
	return " [" + c + "]"
}

func contentPath(system, p string) string {
	return "/v1/systems/" + url.PathEscape(system) + "/content" + escapePath(p)
}

func (b *TransferBench) do(ctx context.Context, method, path string, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(b.API.BaseURL, "/")+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.ContentLength = size
	}
	req.Header.Set("Authorization", "Bearer "+b.API.Token)
	resp, err := b.API.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

// measureWarm measures the upload again, to a system (b.Warm) whose pool holds the one
// connection a listing opened just before; a failure to get there is recorded as the run's error.
func (b *TransferBench) measureWarm(ctx context.Context, streams int, used func() int) {
	ep, err := b.Warm(ctx)
	if err == nil {
		var l struct{}
		err = b.API.Call(ctx, http.MethodGet, listPath(ep.System, b.RemoteDir, 10), nil, http.StatusOK, &l)
	}
	used() // the listing is not the upload
	remote := b.remote("bench-warm.bin")
	b.measurePool(TransferUpload, PoolWarm, "", BaselineTarget, streams, b.Size, func() (int, error) {
		if err != nil {
			return 0, fmt.Errorf("warm the pool: %w", err)
		}
		err := b.upload(ctx, ep.System, remote, "")
		return used(), err
	})
	if b.Remove != nil {
		_ = b.Remove(remote)
	}
}

// upload PUTs the local file to remote on system, with digest as its digest parameter unless
// it is empty (the default: SHA-256).
func (b *TransferBench) upload(ctx context.Context, system, remote, digest string) error {
	f, err := os.Open(b.Local)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	defer f.Close()
	q := "?overwrite=true"
	if digest != "" {
		q += "&digest=" + url.QueryEscape(digest)
	}
	resp, err := b.do(ctx, "PUT", contentPath(system, remote)+q, f, b.Size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return &StatusError{Code: resp.StatusCode, Detail: strings.TrimSpace(string(msg))}
	}
	return nil
}

func (b *TransferBench) download(ctx context.Context, remote string) error {
	resp, err := b.do(ctx, "GET", contentPath(b.Src.System, remote), nil, 0)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return &StatusError{Code: resp.StatusCode, Detail: strings.TrimSpace(string(msg))}
	}
	// The body is read in large pieces, as a client that saves a download does, and not
	// through io.Discard's ReadFrom (8 KiB reads): the bench process's CPU is charged to sshapi.
	n, err := io.CopyBuffer(discardWriter{}, resp.Body, make([]byte, downloadReadBytes))
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if n != b.Size {
		return fmt.Errorf("download: got %d bytes, want %d", n, b.Size)
	}
	return nil
}

// downloadReadBytes is the size of the bench client's reads of a download's body.
const downloadReadBytes = 256 << 10

// discardWriter drops what it is given; unlike io.Discard it has no ReadFrom, so io.CopyBuffer
// reads with the caller's buffer.
type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// transfer submits a transfer from Src to Dst with streams (0 = automatic), waits until it is
// terminal and returns the stream count it used.
func (b *TransferBench) transfer(ctx context.Context, src, dst string, streams int) (int, error) {
	return b.transferBetween(ctx, b.Src.System, src, b.Dst.System, dst, streams)
}

// transferBetween submits a transfer from srcSys:src to dstSys:dst with streams (0 =
// automatic), waits until it is terminal and returns the stream count it used.
func (b *TransferBench) transferBetween(ctx context.Context, srcSys, src, dstSys, dst string, streams int) (int, error) {
	body := map[string]any{"source": map[string]string{"system": srcSys, "path": src},
		"destination": map[string]string{"system": dstSys, "path": dst}, "verify": b.Verify}
	if streams > 0 {
		body["streams"] = streams
	}
	t, err := b.API.waitTransfer(ctx, body, 20*time.Millisecond)
	return t.Streams, err
}

func (b *TransferBench) sftp(ctx context.Context, ep SSHEndpoint, batch string) error {
	args := ep.sshArgs()
	for i := range args { // sftp spells the port -P and takes no -l
		if args[i] == "-p" {
			args[i] = "-P"
		}
	}
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-l" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	if b.Cipher != "" {
		out = append(out, "-c", b.Cipher)
	}
	cmd := exec.CommandContext(ctx, "sftp", append(out, "-q", "-b", "-", ep.User+"@"+ep.Host)...)
	cmd.Stdin = strings.NewReader(batch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sftp: %w: %s", err, truncate(strings.TrimSpace(string(msg)), 300))
	}
	return nil
}

// scp3 runs scp -3 (with the extra options) from src on Src to dst on Dst.
func (b *TransferBench) scp3(ctx context.Context, src, dst string, extra ...string) error {
	uri := func(ep SSHEndpoint, p string) string {
		return fmt.Sprintf("scp://%s@%s/%s", ep.User, ep.Addr(), p)
	}
	args := append([]string{"-3", "-q", "-F", "/dev/null", "-i", b.Src.SSH.KeyFile, "-i", b.Dst.SSH.KeyFile,
		"-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR"}, extra...)
	cmd := exec.CommandContext(ctx, "scp", append(args, uri(b.Src.SSH, src), uri(b.Dst.SSH, dst))...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("scp -3: %w: %s", err, truncate(strings.TrimSpace(string(msg)), 300))
	}
	return nil
}

// parallelGet runs n `sftp get` of src to /dev/null at once, each over its own connection.
func (b *TransferBench) parallelGet(ctx context.Context, src string, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = b.sftp(ctx, b.Src.SSH, fmt.Sprintf("get %s /dev/null\n", src)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ParseStreams parses "1,2,4,auto" (auto = 0) into stream counts.
func ParseStreams(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f == "auto" {
			out = append(out, 0)
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("%q is not a stream count (1-64 or auto)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseSize parses a byte size such as 4MiB, 256MiB, 1GiB, 1GB or 1048576.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional KiB/MiB/GiB suffix", s)
	}
	return n * mult, nil
}

// WriteJSON writes the report to path.
func (r *TransferReport) WriteJSON(path string) error {
	return writeJSON(path, r)
}
