package api

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmarks of the files API against OpenSSH clients on the same sshd, in the same run:
//
//	go test -run '^$' -bench 'Listing|Stat|Transfer' -benchtime 20x ./internal/api/
//
// They measure; they assert nothing about speed.

// benchEnv is newEnv plus an OpenSSH client configured for the same server and key.
type benchEnv struct {
	*env
	sshArgs []string // ssh options: key, known_hosts, port, user
	ctl     string   // ControlPath of a running master
}

func newBenchEnv(b *testing.B) *benchEnv {
	e := newEnv(b)
	e.register("alice", "hpc")
	dir := b.TempDir()
	key := filepath.Join(dir, "id")
	if err := os.WriteFile(key, e.srv.PrivateKeyPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	kh := filepath.Join(dir, "known_hosts")
	line := fmt.Sprintf("[%s]:%d %s\n", e.srv.Host, e.srv.Port, e.srv.AuthorizedHostKey())
	if err := os.WriteFile(kh, []byte(line), 0o600); err != nil {
		b.Fatal(err)
	}
	be := &benchEnv{env: e, ctl: filepath.Join(dir, "ctl")}
	be.sshArgs = []string{"-i", key, "-o", "UserKnownHostsFile=" + kh, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
		"-o", "IdentitiesOnly=yes", "-p", strconv.Itoa(e.srv.Port), "-l", e.srv.User}
	master := exec.Command("ssh", append(be.sshArgs, "-o", "ControlMaster=yes", "-o", "ControlPath="+be.ctl, "-N", e.srv.Host)...)
	if err := master.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = master.Process.Kill(); _ = master.Wait() })
	for i := 0; i < 100 && !fileExists(be.ctl); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return be
}

func (be *benchEnv) muxSSH(b *testing.B, cmd string) []byte {
	out, err := exec.Command("ssh", append(be.sshArgs, "-o", "ControlPath="+be.ctl, be.srv.Host, cmd)...).Output()
	if err != nil {
		b.Fatalf("ssh %s: %v", cmd, err)
	}
	return out
}

func (be *benchEnv) get(b *testing.B, client *http.Client, tok, path string, w io.Writer) {
	req, _ := http.NewRequest("GET", be.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := io.Copy(w, res.Body); err != nil {
		b.Fatal(err)
	}
	if res.StatusCode != 200 {
		b.Fatalf("GET %s: %d", path, res.StatusCode)
	}
}

// BenchmarkListing10k: full JSON listing of a 10,000-entry directory through the API versus
// `ssh host 'ls dir'` over one multiplexed OpenSSH connection.
func BenchmarkListing10k(b *testing.B) {
	be := newBenchEnv(b)
	dir := be.srv.MkTemp(b)
	for i := range 10_000 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	chownTree(b, dir, be.srv.User)
	tok := be.token("alice")
	for _, sftpOnly := range []bool{false, true} {
		name := "sshapi-json"
		if sftpOnly {
			name += "-sftp-only"
		}
		b.Run(name, func(b *testing.B) {
			be.api.cfg.ListSFTPOnly = sftpOnly // no request is in flight
			defer func() { be.api.cfg.ListSFTPOnly = false }()
			var buf bytes.Buffer
			var took []time.Duration
			cpu := processCPU()
			for b.Loop() {
				buf.Reset()
				start := time.Now()
				be.get(b, http.DefaultClient, tok, "/v1/systems/hpc/ls/"+remote(dir), &buf)
				took = append(took, time.Since(start))
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "listings/s")
			b.ReportMetric(median(took).Seconds()*1000, "p50-ms")
			b.ReportMetric((processCPU()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
		})
	}
	// 50 listings in flight at once: throughput.
	for _, sftpOnly := range []bool{false, true} {
		name := "sshapi-json-c50"
		if sftpOnly {
			name += "-sftp-only"
		}
		b.Run(name, func(b *testing.B) {
			be.api.cfg.ListSFTPOnly = sftpOnly // no request is in flight
			defer func() { be.api.cfg.ListSFTPOnly = false }()
			b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				var buf bytes.Buffer
				for pb.Next() {
					buf.Reset()
					be.get(b, http.DefaultClient, tok, "/v1/systems/hpc/ls/"+remote(dir), &buf)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "listings/s")
			b.ReportMetric((processCPU()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
		})
	}
	for _, ls := range []string{"ls", "ls -la", `find -H %s -mindepth 1 -maxdepth 1 -printf '%%f\0%%y%%m\0%%s\0%%T@\0%%U\0%%G\0%%l\0'`} {
		name := strings.ReplaceAll(ls, " ", "")
		if strings.HasPrefix(ls, "find") {
			name = "find-printf"
		}
		b.Run("openssh-mux-"+name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				if strings.Contains(ls, "%s") {
					be.muxSSH(b, fmt.Sprintf(ls, dir))
				} else {
					be.muxSSH(b, ls+" "+dir)
				}
				took = append(took, time.Since(start))
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "listings/s")
			b.ReportMetric(median(took).Seconds()*1000, "p50-ms")
		})
	}
}

// processCPU is the CPU time this process (sshapi and the benchmark's HTTP client, not sshd)
// has used: per listing, a measure the other load on a shared machine disturbs far less than
// wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median returns the middle of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkStat50: stat requests per second with 50 concurrent clients.
func BenchmarkStat50(b *testing.B) {
	be := newBenchEnv(b)
	dir := be.srv.MkTemp(b)
	tok := be.token("alice")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Run("sshapi", func(b *testing.B) {
		var wg sync.WaitGroup
		work := make(chan struct{})
		start := time.Now()
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					be.get(b, client, tok, "/v1/systems/hpc/stat/"+remote(dir), io.Discard)
				}
			}()
		}
		for range b.N {
			work <- struct{}{}
		}
		close(work)
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "stats/s")
	})
	b.Run("openssh-mux-stat", func(b *testing.B) {
		var wg sync.WaitGroup
		work := make(chan struct{})
		start := time.Now()
		for range 8 { // MaxSessions 10 on the one multiplexed connection
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					be.muxSSH(b, "stat "+dir)
				}
			}()
		}
		for range b.N {
			work <- struct{}{}
		}
		close(work)
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "stats/s")
	})
}

// BenchmarkTransfer1GiB: 1 GiB upload and download through the HTTP API versus OpenSSH sftp on
// the same file.
func BenchmarkTransfer1GiB(b *testing.B) {
	be := newBenchEnv(b)
	dir := be.srv.MkTemp(b)
	local := filepath.Join(b.TempDir(), "src.bin")
	f, _ := os.Create(local)
	if _, err := io.CopyN(f, rand.Reader, 1<<30); err != nil {
		b.Fatal(err)
	}
	f.Close()
	tok := be.token("alice")
	remoteFile := dir + "/big.bin"
	b.Run("sshapi-upload", func(b *testing.B) {
		b.SetBytes(1 << 30)
		for b.Loop() {
			src, _ := os.Open(local)
			req, _ := http.NewRequest("PUT", be.url+"/v1/systems/hpc/content/"+remote(remoteFile)+"?overwrite=true", src)
			req.ContentLength = 1 << 30
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := http.DefaultClient.Do(req)
			if err != nil || res.StatusCode != 201 {
				b.Fatalf("upload: %v %v", err, res)
			}
			res.Body.Close()
			src.Close()
		}
	})
	b.Run("sshapi-download", func(b *testing.B) {
		b.SetBytes(1 << 30)
		for b.Loop() {
			be.get(b, http.DefaultClient, tok, "/v1/systems/hpc/content/"+remote(remoteFile), io.Discard)
		}
	})
	sftpBatch := func(b *testing.B, cmds string) {
		c := exec.Command("sftp", append(append([]string{}, be.sshArgs[:len(be.sshArgs)-4]...), "-P", strconv.Itoa(be.srv.Port), "-b", "-", be.srv.User+"@"+be.srv.Host)...)
		c.Stdin = strings.NewReader(cmds)
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("sftp: %v %s", err, out)
		}
	}
	b.Run("openssh-sftp-upload", func(b *testing.B) {
		b.SetBytes(1 << 30)
		for b.Loop() {
			sftpBatch(b, "put "+local+" "+remoteFile+"\n")
		}
	})
	b.Run("openssh-sftp-download", func(b *testing.B) {
		b.SetBytes(1 << 30)
		for b.Loop() {
			sftpBatch(b, "get "+remoteFile+" /dev/null\n")
		}
	})
}
