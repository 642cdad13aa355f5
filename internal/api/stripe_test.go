package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshpool"
)

// stripeConfig stripes every transfer of 1 MiB or more over 4 channels even on loopback (an
// absurd assumed link rate and no RTT floor make the measured RTT call for the maximum), in
// 64 KiB chunks.
func stripeConfig() Config {
	return Config{StripeMinBytes: 1 << 20, StripeLinkRate: 1e15, StripeMinRTT: time.Nanosecond, StripeMaxChannels: 4, DownloadBufferBytes: 64 << 10}
}

// randomFile writes n random bytes to a new file in dir owned by the remote user.
func randomFile(t *testing.T, e *env, dir, name string, n int) []byte {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	chownToUser(t, p, e.srv.User)
	return data
}

// TestStripedDownload: a large file comes back byte-identical over four channels, whole and in
// every kind of Range request; a small file is served as before, on one channel.
func TestStripedDownload(t *testing.T) {
	e := newEnvConfig(t, stripeConfig(), nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	size := 5<<20 + 12345 // not a multiple of the chunk size
	data := randomFile(t, e, dir, "big.bin", size)
	small := randomFile(t, e, dir, "small.bin", 1000)
	url := "/v1/systems/hpc/content" + dir

	r := e.do("alice", "GET", url+"/big.bin", nil)
	if r.status != 200 || !bytes.Equal(r.body, data) {
		t.Fatalf("striped download: %d, %d bytes, equal %v", r.status, len(r.body), bytes.Equal(r.body, data))
	}
	if !strings.Contains(e.log.String(), "striping a file transfer") || !strings.Contains(e.log.String(), "channels=4") {
		t.Fatalf("the download was not striped over 4 channels:\n%s", e.log.String())
	}
	tests := []struct {
		rng      string
		from, to int // inclusive
		striped  bool
	}{
		{"bytes=0-99", 0, 99, false}, // small ranges are not worth a read-ahead
		{"bytes=65530-65545", 65530, 65545, false},
		{"bytes=-777", size - 777, size - 1, false},
		{"bytes=65530-3999999", 65530, 3999999, true}, // from inside a chunk
		{"bytes=-2000000", size - 2000000, size - 1, true},
		{fmt.Sprintf("bytes=%d-", size-1100000), size - 1100000, size - 1, true},
	}
	for _, tc := range tests {
		before := strings.Count(e.log.String(), "striping a file transfer")
		r := e.do("alice", "GET", url+"/big.bin", nil, "Range", tc.rng)
		if r.status != 206 || !bytes.Equal(r.body, data[tc.from:tc.to+1]) {
			t.Errorf("Range %s: %d, %d bytes", tc.rng, r.status, len(r.body))
		}
		if striped := strings.Count(e.log.String(), "striping a file transfer") > before; striped != tc.striped {
			t.Errorf("Range %s: striped %v, want %v", tc.rng, striped, tc.striped)
		}
	}
	// Two large ranges: a multipart answer, each part seeking the striped reader.
	multiBefore := strings.Count(e.log.String(), "striping a file transfer")
	r = e.do("alice", "GET", url+"/big.bin", nil, "Range", "bytes=10-700009,4000000-4600999")
	_, params, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if r.status != 206 || err != nil {
		t.Fatalf("multi-range: %d %v", r.status, err)
	}
	mr := multipart.NewReader(bytes.NewReader(r.body), params["boundary"])
	for _, want := range [][]byte{data[10:700010], data[4000000:4601000]} {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(p)
		if !bytes.Equal(got, want) {
			t.Errorf("multi-range part: %d bytes, want %d", len(got), len(want))
		}
	}
	if strings.Count(e.log.String(), "striping a file transfer") == multiBefore {
		t.Fatal("two large ranges were not striped")
	}
	before := strings.Count(e.log.String(), "striping a file transfer")
	if r := e.do("alice", "HEAD", url+"/big.bin", nil); r.status != 200 {
		t.Fatalf("HEAD: %d", r.status)
	}
	r = e.do("alice", "GET", url+"/small.bin", nil)
	if r.status != 200 || !bytes.Equal(r.body, small) {
		t.Fatalf("small download: %d", r.status)
	}
	if n := strings.Count(e.log.String(), "striping a file transfer"); n != before {
		t.Fatalf("a HEAD or a file below stripe_min_bytes was striped")
	}
}

// TestStripedUpload: a large upload is written over four channels and verified; a wrong digest
// discards it and leaves no temporary file.
func TestStripedUpload(t *testing.T) {
	e := newEnvConfig(t, stripeConfig(), nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	url := "/v1/systems/hpc/content" + dir
	payload := make([]byte, 3<<20+999)
	_, _ = rand.Read(payload)
	sum := sha256.Sum256(payload)
	r := e.do("alice", "PUT", url+"/up.bin", string(payload), "X-Checksum-Sha256", hex.EncodeToString(sum[:]))
	if r.status != 201 || r.json(t)["sha256"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("striped upload: %d %s", r.status, r.body)
	}
	if !strings.Contains(e.log.String(), "striping a file transfer") || !strings.Contains(e.log.String(), "channels=4") {
		t.Fatalf("the upload was not striped over 4 channels:\n%s", e.log.String())
	}
	got, err := os.ReadFile(filepath.Join(dir, "up.bin"))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("uploaded file: %d bytes, equal %v, %v", len(got), bytes.Equal(got, payload), err)
	}
	r = e.do("alice", "PUT", url+"/bad.bin", string(payload), "X-Checksum-Sha256", strings.Repeat("0", 64))
	if r.status != 422 {
		t.Fatalf("wrong digest: %d %s", r.status, r.body)
	}
	assertOnly(t, dir, "up.bin")
}

// TestStripedUploadAborted: a client that sends half of a striped upload and hangs up leaves
// neither the file nor its temporary name behind.
func TestStripedUploadAborted(t *testing.T) {
	e := newEnvConfig(t, stripeConfig(), nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	const total = 4 << 20
	fmt.Fprintf(c, "PUT /v1/systems/hpc/content%s/cut.bin HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", dir, e.token("alice"), total)
	half := make([]byte, total/2)
	_, _ = rand.Read(half)
	if _, err := c.Write(half); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the temporary file to appear", func() bool {
		ents, _ := os.ReadDir(dir)
		return len(ents) == 1
	})
	c.Close()
	waitFor(t, 30*time.Second, "the aborted upload to be cleaned up", func() bool {
		ents, _ := os.ReadDir(dir)
		return len(ents) == 0
	})
}

// TestStripedDownloadBudget: striped chunk buffers come from the download budget. With room for
// four chunks, a stalled striped download takes all four (two channels) and a second download
// is answered 503 until the first gives them back.
func TestStripedDownloadBudget(t *testing.T) {
	cfg := stripeConfig()
	cfg.DownloadBufferBudgetBytes = 4 * int64(cfg.DownloadBufferBytes)
	cfg.DownloadBufferBudgetPerOwnerBytes = cfg.DownloadBufferBudgetBytes // one user here
	cfg.BudgetWait = 300 * time.Millisecond
	cfg.StreamWriteTimeout = time.Second
	e := newEnvConfig(t, cfg, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	big := filepath.Join(dir, "big.bin")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Truncate(256 << 20) // sparse: more than any socket buffers
	f.Close()
	chownToUser(t, big, e.srv.User)
	small := randomFile(t, e, dir, "small.bin", 10)
	_ = rawRequest(t, e, "GET", "/v1/systems/hpc/content"+big, "")
	if !strings.Contains(e.log.String(), "channels=2 chunks=4") {
		t.Fatalf("the stalled download did not stripe within the budget:\n%s", e.log.String())
	}
	r := e.do("alice", "GET", "/v1/systems/hpc/content"+dir+"/small.bin", nil)
	if r.status != 503 {
		t.Fatalf("download while the striped one holds the budget: %d %s", r.status, r.body)
	}
	waitFor(t, 30*time.Second, "the stalled striped download to give its buffers back", func() bool {
		r = e.do("alice", "GET", "/v1/systems/hpc/content"+dir+"/small.bin", nil)
		return r.status == 200
	})
	if !bytes.Equal(r.body, small) {
		t.Fatalf("download: %q", r.body)
	}
}

// assertOnly fails unless dir holds exactly the names given.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range ents {
		got = append(got, en.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

// TestStripeChannels: the channel count fills the bandwidth-delay product of the assumed link
// with 2 MiB windows, between 1 and the cap, and is 1 below the RTT floor.
func TestStripeChannels(t *testing.T) {
	s := &Server{cfg: Config{}.withDefaults()} // 10 Gbit/s, 8 channels, 5 ms floor
	tests := []struct {
		rtt  time.Duration
		want int
	}{
		{200 * time.Microsecond, 1}, // loopback, LAN
		{4 * time.Millisecond, 1},   // below the floor
		{5 * time.Millisecond, 3},   // 6.25 MB / 2 MiB
		{10 * time.Millisecond, 6},  // 12.5 MB / 2 MiB
		{50 * time.Millisecond, 8},  // capped
	}
	for _, tc := range tests {
		if got := s.stripeChannels(tc.rtt); got != tc.want {
			t.Errorf("rtt %v: %d channels, want %d", tc.rtt, got, tc.want)
		}
	}
}

// TestChunkedOneChannel: with striping off, a download larger than a buffer is read two chunks
// ahead and comes back byte-identical, whole and in ranges; an upload larger than a buffer is
// written in chunks over its one channel (holding two buffers of the budget while it runs) and
// verified; with the owner's share of the budget held, the upload still succeeds (through
// pkg/sftp's own reads); every buffer goes back and nothing is left behind.
func TestChunkedOneChannel(t *testing.T) {
	const chunk = 64 << 10
	e := newEnvConfig(t, Config{StripeMaxChannels: 1, DownloadBufferBytes: chunk, DownloadBufferBudgetBytes: 8 * chunk}, nil)
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	url := "/v1/systems/hpc/content" + dir
	budgetFree := func() bool {
		l, err := e.api.downloads.TryAcquire("alice", e.api.downloads.Share())
		l.Release()
		return err == nil
	}
	size := 3<<20 + 4321
	data := randomFile(t, e, dir, "big.bin", size)
	r := e.do("alice", "GET", url+"/big.bin", nil)
	if r.status != 200 || !bytes.Equal(r.body, data) {
		t.Fatalf("download: %d, %d bytes, equal %v", r.status, len(r.body), bytes.Equal(r.body, data))
	}
	for _, rng := range [][2]int{{65530, 1999999}, {size - 70000, size - 1}, {5, 9}} {
		r := e.do("alice", "GET", url+"/big.bin", nil, "Range", fmt.Sprintf("bytes=%d-%d", rng[0], rng[1]))
		if r.status != 206 || !bytes.Equal(r.body, data[rng[0]:rng[1]+1]) {
			t.Errorf("Range %v: %d, %d bytes", rng, r.status, len(r.body))
		}
	}
	waitFor(t, 10*time.Second, "the downloads to give their buffers back", budgetFree)

	payload := make([]byte, 2<<20+999)
	_, _ = rand.Read(payload)
	sum := sha256.Sum256(payload)
	upload := func(name string) {
		t.Helper()
		r := e.do("alice", "PUT", url+"/"+name, string(payload), "X-Checksum-Sha256", hex.EncodeToString(sum[:]))
		if r.status != 201 || r.json(t)["sha256"] != hex.EncodeToString(sum[:]) {
			t.Fatalf("upload %s: %d %s", name, r.status, r.body)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("uploaded %s: %d bytes, equal %v, %v", name, len(got), bytes.Equal(got, payload), err)
		}
	}
	upload("up.bin")
	held, err := e.api.downloads.TryAcquire("alice", e.api.downloads.Share())
	if err != nil {
		t.Fatal(err)
	}
	upload("up2.bin")
	held.Release()

	// An upload under way holds its two chunks: the owner's whole share is no longer free.
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PUT %s/cut.bin HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", url, e.token("alice"), len(payload))
	if _, err := c.Write(payload[:len(payload)/2]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the upload to start", func() bool {
		ents, _ := os.ReadDir(dir)
		return len(ents) == 4
	})
	if budgetFree() {
		t.Fatal("an upload under way holds no chunk buffers")
	}
	c.Close()
	waitFor(t, 30*time.Second, "the cut upload to give its buffers back", budgetFree)
	waitFor(t, 30*time.Second, "the cut upload to be cleaned up", func() bool {
		ents, _ := os.ReadDir(dir)
		return len(ents) == 3
	})
	assertOnly(t, dir, "big.bin", "up.bin", "up2.bin")
}

// earlyPool is the pool with a gate: the first dedicated SFTP channel (an upload's first
// channel) is not asked for until a stripe channel has been, or until giveUp has passed, which
// fails the test. It tells "dialed beside the first channel" from "after it" without timing.
type earlyPool struct {
	Pool
	t       *testing.T
	giveUp  time.Duration
	once    sync.Once
	striped chan struct{} // closed at the first StripeSFTP
	held    atomic.Bool   // the first DedicatedSFTP went through the gate
}

// DedicatedSFTP implements Pool.
func (p *earlyPool) DedicatedSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error) {
	if p.held.CompareAndSwap(false, true) {
		select {
		case <-p.striped:
		case <-time.After(p.giveUp):
			p.t.Errorf("the upload's first channel was asked for before any stripe channel (waited %v)", p.giveUp)
		}
	}
	return p.Pool.DedicatedSFTP(ctx, t)
}

// StripeSFTP implements Pool.
func (p *earlyPool) StripeSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error) {
	p.once.Do(func() { close(p.striped) })
	return p.Pool.StripeSFTP(ctx, t)
}

// TestStripedUploadColdPool: a large upload to a system the pool has no connection to asks for
// a stripe connection beside its first channel (both dials under way at once) rather than after
// the first is up and the RTT probed; the upload is whole and striped, and its timeline logged.
func TestStripedUploadColdPool(t *testing.T) {
	var gate *earlyPool
	e := newEnvConfig(t, stripeConfig(), func(_ string, d *Deps, _ **Server) {
		gate = &earlyPool{Pool: d.Pool, t: t, giveUp: 5 * time.Second, striped: make(chan struct{})}
		d.Pool = gate
	})
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	payload := make([]byte, 3<<20+999)
	_, _ = rand.Read(payload)
	r := e.do("alice", "PUT", "/v1/systems/hpc/content"+dir+"/up.bin", string(payload))
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if !gate.held.Load() {
		t.Fatal("the upload asked for no dedicated channel")
	}
	got, err := os.ReadFile(filepath.Join(dir, "up.bin"))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("uploaded file: %d bytes, equal %v, %v", len(got), bytes.Equal(got, payload), err)
	}
	for _, want := range []string{"channels=4", "upload timeline", "renamed@"} {
		if !strings.Contains(e.log.String(), want) {
			t.Fatalf("the log lacks %q:\n%s", want, e.log.String())
		}
	}
	assertOnly(t, dir, "up.bin")
}

// askCount is the pool counting, once armed, the dedicated and the stripe SFTP channels asked
// for.
type askCount struct {
	Pool
	armed    atomic.Bool
	ded, str atomic.Int64
}

// DedicatedSFTP implements Pool.
func (p *askCount) DedicatedSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error) {
	if p.armed.Load() {
		p.ded.Add(1)
	}
	return p.Pool.DedicatedSFTP(ctx, t)
}

// StripeSFTP implements Pool.
func (p *askCount) StripeSFTP(ctx context.Context, t sshpool.Target) (*sshpool.SFTPLease, error) {
	if p.armed.Load() {
		p.str.Add(1)
	}
	return p.Pool.StripeSFTP(ctx, t)
}

// TestStripedUploadWarmPool: a large upload to a system the pool is connected to (a stat went
// first, so the pool measured the path's round trip) asks for its near and far stripe channels
// as soon as it holds its first channel, before the round-trip probe decides: with the chunk
// budget taken, so that the probe decides against striping, they are asked for all the same
// (and given back), where without early stripes none would be. With the budget free the upload
// is striped over them and whole.
func TestStripedUploadWarmPool(t *testing.T) {
	var pool *askCount
	e := newEnvConfig(t, stripeConfig(), func(_ string, d *Deps, _ **Server) {
		pool = &askCount{Pool: d.Pool}
		d.Pool = pool
	})
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	if r := e.do("alice", "GET", "/v1/systems/hpc/stat"+dir, nil); r.status != 200 {
		t.Fatalf("stat: %d %s", r.status, r.body)
	}
	payload := make([]byte, 3<<20+999)
	_, _ = rand.Read(payload)
	upload := func(name string) {
		t.Helper()
		puts := strings.Count(e.log.String(), `"http request" method=PUT`)
		r := e.do("alice", "PUT", "/v1/systems/hpc/content"+dir+"/"+name, string(payload))
		if r.status != 201 {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("uploaded file: %d bytes, equal %v, %v", len(got), bytes.Equal(got, payload), err)
		}
		// The answer goes out before the upload gives its channels back; the next upload's
		// asks are counted from a pool that has them all back (the request's log line is
		// written once its handler has returned).
		awaitState(t, "the upload's handler to return", func() bool {
			return strings.Count(e.log.String(), `"http request" method=PUT`) > puts
		})
	}

	held, err := e.api.downloads.TryAcquire("alice", e.api.downloads.Share())
	if err != nil {
		t.Fatal(err)
	}
	pool.armed.Store(true)
	upload("unstriped.bin")
	held.Release()
	// Four channels: the first, then two near and one far stripe (leaseExtra's split of three).
	if d, s := pool.ded.Load(), pool.str.Load(); d != 3 || s != 1 {
		t.Fatalf("an unstriped upload asked for %d dedicated and %d stripe channels, want 3 and 1 (early stripes)", d, s)
	}
	if strings.Contains(e.log.String(), "channels=4") {
		t.Fatalf("the upload was striped with the budget taken:\n%s", e.log.String())
	}

	pool.ded.Store(0)
	pool.str.Store(0)
	upload("up.bin")
	// The early stripes are the stripes: none is asked for twice. One exception: an early ask
	// that fails is asked for again by the stripe set (under the load of full CI runs one near
	// ask did once and one far ask once), so one more ask of either kind is allowed. Without
	// the early stripes taken over, the stripe set asks for all of its own: 5 dedicated and 2.
	if d, s := pool.ded.Load(), pool.str.Load(); d < 3 || s < 1 || d+s > 5 {
		t.Fatalf("a striped upload asked for %d dedicated and %d stripe channels, want 3 and 1 (one more if an early ask failed)", d, s)
	}
	for _, want := range []string{"channels=4", "upload timeline", "renamed@"} {
		if !strings.Contains(e.log.String(), want) {
			t.Fatalf("the log lacks %q:\n%s", want, e.log.String())
		}
	}
	assertOnly(t, dir, "unstriped.bin", "up.bin")
}

// TestStripedUploadColdPoolAsksAll: on a cold pool the first channel's connection measures the
// round trip as it opens, so a large upload asks for all its stripe channels as soon as it holds
// that channel, before the probe decides: with the chunk budget taken (the probe decides against
// striping) it still asks for the near ones, where before it asked only for the one far stripe
// dialed beside the first channel.
func TestStripedUploadColdPoolAsksAll(t *testing.T) {
	var pool *askCount
	e := newEnvConfig(t, stripeConfig(), func(_ string, d *Deps, _ **Server) {
		pool = &askCount{Pool: d.Pool}
		pool.armed.Store(true)
		d.Pool = pool
	})
	e.register("alice", "hpc")
	dir := e.srv.MkTemp(t)
	payload := make([]byte, 3<<20+999)
	_, _ = rand.Read(payload)
	held, err := e.api.downloads.TryAcquire("alice", e.api.downloads.Share())
	if err != nil {
		t.Fatal(err)
	}
	r := e.do("alice", "PUT", "/v1/systems/hpc/content"+dir+"/up.bin", string(payload))
	held.Release()
	if r.status != 201 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	got, err := os.ReadFile(filepath.Join(dir, "up.bin"))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("uploaded file: %d bytes, equal %v, %v", len(got), bytes.Equal(got, payload), err)
	}
	// Four channels: the first, the far stripe dialed beside it, then two near ones.
	if d, s := pool.ded.Load(), pool.str.Load(); d != 3 || s != 1 {
		t.Fatalf("a cold unstriped upload asked for %d dedicated and %d stripe channels, want 3 and 1", d, s)
	}
	if strings.Contains(e.log.String(), "channels=4") {
		t.Fatalf("the upload was striped with the budget taken:\n%s", e.log.String())
	}
	assertOnly(t, dir, "up.bin")
}
