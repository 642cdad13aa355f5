package study

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
)

// TestRunTransfer moves a 4 MiB file through a real sshd on loopback and through a wanem path,
// beside OpenSSH, and checks that every run succeeded and that the tables and plot are written.
func TestRunTransfer(t *testing.T) {
	for _, bin := range []string{"sftp", "scp"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
	}
	rep, err := RunTransfer(t.Context(), TransferOptions{Size: 4 << 20, Streams: []int{1, 2, 0}, Connections: []int{2},
		Paths: []TransferPath{{}, {RTT: 2 * time.Millisecond, Rate: 500_000_000}}, Compare: true})
	if err != nil {
		t.Fatal(err)
	}
	// per path: upload×2, download×2, three stream counts, scp -3, 2 scaling runs
	if got, want := len(rep.Runs), 2*(2+2+3+1+2); got != want {
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
	for _, want := range []string{"#### Transfers: loopback", "openssh-scp-3", "2 × openssh-sftp get", "sshapi ÷ OpenSSH", "×"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	out := t.TempDir()
	imgs, err := writeTransferOutputs(&bench.Report{}, rep, out)
	if err != nil || len(imgs) != 1 {
		t.Fatalf("plots %v, %v", imgs, err)
	}
	back, err := os.ReadFile(filepath.Join(out, "benchmarks.json"))
	if err != nil || !strings.Contains(string(back), `"transfers"`) || !strings.Contains(string(back), `"runs"`) {
		t.Fatalf("benchmarks.json: %v %.200s", err, back)
	}
	var doc bytes.Buffer
	if err := TransferSection(&doc, rep, imgs); err != nil || !strings.Contains(doc.String(), "## File transfers") || !strings.Contains(doc.String(), "img/"+imgs[0]) {
		t.Fatalf("section: %v\n%s", err, doc.String())
	}
}
