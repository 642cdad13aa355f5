package study

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/bench"
)

// TestRunFiles copies a tree of 300 small files between two systems on a real sshd through
// sshapi (SHA-256 verified), an OpenSSH tar pipe and scp -3 -r, and checks that every copy
// succeeded and matched the source, that sshapi's peak RSS was read and that the section is
// written.
func TestRunFiles(t *testing.T) {
	rep, err := RunFiles(t.Context(), FilesOptions{Files: 300, FileSize: 4 << 10, PerDir: 128, Compare: true, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Runs {
		got = append(got, fmt.Sprintf("%s %d", r.Target, r.Round))
		if r.Error != "" || r.FilesPerSecond <= 0 || r.Seconds <= 0 || r.Files != 300 || r.FileSize != 4096 {
			t.Errorf("run %+v", r)
		}
	}
	if want := strings.Join([]string{bench.BaselineTarget + " 1", bench.PeerTarPipe + " 1", bench.PeerTarPipe + " 2", bench.BaselineTarget + " 2",
		bench.PeerSCP3R + " 1"}, ","); strings.Join(got, ",") != want {
		t.Fatalf("targets %v, want %s", got, want)
	}
	if s := rep.Runs[0]; s.FilesDone != 300 || s.SameSystem || s.PeakRSSMiB <= 0 || s.PeakRSSMiB < s.RSSBeforeMiB {
		t.Errorf("sshapi run %+v", s)
	}
	var doc bytes.Buffer
	if err := FilesSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Many small files", "#### 300 files of 4096 bytes, system to system", "| sshapi | 1 | `POST /v1/transfers` recursive, verify sha256 | sha256 on both systems |",
		"| openssh tar pipe | 2 | `ssh src 'tar -cf - DIR' \\| ssh dst 'tar -xf -'` | none |", "| openssh-scp-3 -r | 1 | `scp -3 -r` | none |", "×",
		"Over 2 rounds each: sshapi ", "in ABBA order"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, doc.String())
		}
	}
}

// TestSameTree: the check every small-files copy gets finds a missing, a changed and an extra
// file.
func TestSameTree(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := writeTree(src, 5, 2, 16); err != nil {
		t.Fatal(err)
	}
	if err := writeTree(dst, 5, 2, 16); err != nil {
		t.Fatal(err)
	}
	if err := sameTree(src, dst, 5); err != nil {
		t.Fatalf("identical trees: %v", err)
	}
	if err := sameTree(src, dst, 6); err == nil {
		t.Error("a wrong count passed")
	}
	extra := dst + "/d00000/extra"
	writeFile(t, extra)
	if err := sameTree(src, dst, 5); err == nil {
		t.Error("an extra file passed")
	}
	writeFile(t, dst+"/d00001/f00000") // changed content
	if err := sameTree(src, dst, 5); err == nil {
		t.Error("a changed file passed")
	}
}

// TestBenchFiles runs the many-small-files bench at the size SSHAPI_BENCH_FILES names (skipped
// without it), printing each run: `SSHAPI_BENCH_FILES=20000 go test ./internal/bench/study
// -run TestBenchFiles -v -timeout 1h`; SSHAPI_BENCH_FILES_PEERS=tar leaves scp -3 -r out, none
// both peers. It fails if a run failed or its copy differed.
func TestBenchFiles(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SSHAPI_BENCH_FILES"))
	if n <= 0 {
		t.Skip("SSHAPI_BENCH_FILES is not set")
	}
	rep, err := RunFiles(t.Context(), FilesOptions{Files: n, FileSize: 4 << 10, Compare: os.Getenv("SSHAPI_BENCH_FILES_PEERS") != "none",
		NoSCP: os.Getenv("SSHAPI_BENCH_FILES_PEERS") == "tar", Progress: os.Stdout})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Runs {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Target, r.Error)
		}
	}
	if len(rep.Runs) > 1 && rep.Runs[1].FilesPerSecond > 0 {
		fmt.Printf("sshapi ÷ tar pipe: %.2f×\n", rep.Runs[0].FilesPerSecond/rep.Runs[1].FilesPerSecond)
	}
}
