package study

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
)

// TestRunTransfer moves a 4 MiB file through a real sshd on loopback and through a wanem path,
// beside OpenSSH, and to and from a real S3 server (versitygw) beside rclone, and checks that
// every run succeeded and that the tables and plot are written.
func TestRunTransfer(t *testing.T) {
	for _, bin := range []string{"sftp", "scp", "rclone"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
	}
	rep, err := RunTransfer(t.Context(), TransferOptions{Size: 4 << 20, Streams: []int{1, 2, 0}, Connections: []int{2},
		Paths: []TransferPath{{}, {RTT: 2 * time.Millisecond, Rate: 500_000_000}}, Compare: true, S3: true})
	if err != nil {
		t.Fatal(err)
	}
	// per path: upload×2, download×2, three stream counts, scp -3, 2 scaling runs, S3 both ways
	// and bucket to bucket × 2; on the wanem path also the upload from a warm pool
	if got, want := len(rep.Runs), 2*(2+2+3+1+2+6)+1; got != want {
		t.Fatalf("%d runs, want %d: %+v", got, want, rep.Runs)
	}
	for _, r := range rep.Runs {
		if r.Error != "" || r.MBps <= 0 || r.CPUSeconds < 0 {
			t.Errorf("run %+v", r)
		}
		if r.Scenario == bench.TransferSystem && r.Target == bench.BaselineTarget && r.Streams > 0 && r.StreamsUsed > r.Streams {
			t.Errorf("asked %d streams, used %d", r.Streams, r.StreamsUsed)
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#### Transfers: loopback", "openssh-scp-3", "2 × openssh-sftp get", "sshapi ÷ OpenSSH", "sftp-to-s3", "s3-to-sftp", "| rclone |", "×"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	out := t.TempDir()
	imgs, err := rep.WritePlots(out)
	if err != nil || len(imgs) != 1 {
		t.Fatalf("plots %v, %v", imgs, err)
	}
	var doc bytes.Buffer
	if err := TransferSection(&doc, rep, imgs); err != nil || !strings.Contains(doc.String(), "## File transfers") || !strings.Contains(doc.String(), "img/"+imgs[0]) {
		t.Fatalf("section: %v\n%s", err, doc.String())
	}
}

// TestRunTransferChannels uploads and downloads an 8 MiB file through a fresh sshapi per channel
// count on a wanem path beside sftp, and checks that each count used the channels asked for
// (which the bench reads from the service's log). The file is large enough to keep 3 channels
// busy: the service opens no more channels than a transfer's chunks can keep busy (4 MiB took
// 2 of the 3 asked for).
func TestRunTransferChannels(t *testing.T) {
	rep, err := RunTransfer(t.Context(), TransferOptions{Size: 8 << 20, Channels: []int{1, 3, 0},
		Paths: []TransferPath{{RTT: 2 * time.Millisecond, Rate: 500_000_000}}, Compare: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(rep.Runs), 3*2+2; got != want {
		t.Fatalf("%d runs, want %d: %+v", got, want, rep.Runs)
	}
	for _, r := range rep.Runs {
		if r.Error != "" || r.MBps <= 0 || r.LinkMBps != 500 {
			t.Errorf("run %+v", r)
		}
		if r.Scenario != bench.TransferUploadChannels && r.Scenario != bench.TransferDownloadChannels {
			t.Errorf("scenario %q", r.Scenario)
		}
		if r.Target == bench.BaselineTarget && r.Streams > 0 && r.StreamsUsed != r.Streams {
			t.Errorf("%s asked %d channels, used %d", r.Scenario, r.Streams, r.StreamsUsed)
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"per SFTP channel count: 4 Gbit/s × 2ms RTT (wanem)", "| download (GET …/content) | sshapi | 3 |", "| upload (PUT …/content) | openssh-sftp | 1 |", "% of link"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// TestRunCiphers uploads and downloads a 2 MiB file per cipher of the paper, sshapi limited to
// the cipher beside `sftp -c`, on loopback and a wanem path, and checks that every run
// succeeded with the cipher recorded and that the per-cipher table has a row per cipher and
// direction with both sides' CPU per GiB.
func TestRunCiphers(t *testing.T) {
	o := PaperCipherOptions(2<<20, PaperCiphers, nil)
	o.Paths[1] = TransferPath{RTT: 2 * time.Millisecond, Rate: 500_000_000}
	rep, err := RunTransfer(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	// Per path and cipher: upload and download, sshapi and sftp, and sshapi's upload again with
	// digest=none; on the wanem path also the upload from a warm pool.
	if got, want := len(rep.Runs), 2*len(PaperCiphers)*5+len(PaperCiphers); got != want {
		t.Fatalf("%d runs, want %d: %+v", got, want, rep.Runs)
	}
	for _, r := range rep.Runs {
		if r.Error != "" || r.MBps <= 0 || r.Cipher == "" || r.CPUSeconds <= 0 || r.ChildCPUSeconds < 0 || (r.Target == bench.PeerSFTP) != (r.ChildCPUSeconds > 0) {
			t.Errorf("run %+v", r)
		}
	}
	var doc bytes.Buffer
	if err := CipherSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	md := doc.String()
	for _, want := range []string{"## Ciphers", "#### Per cipher: loopback", "#### Per cipher: 4 Gbit/s × 2ms RTT (wanem)", "OpenSSH client CPU s/GiB (sftp + ssh)"} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	for _, c := range PaperCiphers {
		for _, dir := range []string{"upload", "download"} {
			row := "| `" + c + "` | " + dir + " |"
			if n := strings.Count(md, row); n != 2 {
				t.Errorf("%d rows %q, want one per path", n, row)
			}
		}
		if row := "| `" + c + "` | upload (warm pool) |"; strings.Count(md, row) != 1 {
			t.Errorf("%d rows %q, want one (the wanem path's)", strings.Count(md, row), row)
		}
		if row := "| `" + c + "` | upload, digest=none (warm pool) |"; strings.Count(md, row) != 2 {
			t.Errorf("%d rows %q, want one per path", strings.Count(md, row), row)
		}
	}
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		// cipher, direction, then MB/s ×2, ratio, CPU/GiB ×2, ratio; the bench process's own CPU
		// during sftp and sshd's may stay under a clock tick in so short a run
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) != 11 || strings.Contains(l, "failed") || slices.Contains(cells[2:8], "–") || !strings.HasSuffix(cells[4], "×") || !strings.HasSuffix(cells[7], "×") {
			t.Errorf("row without its figures and ratios: %s", l)
		}
	}
}
