package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestFilesBenchRemovesCopiesAtTheEnd: the copies are checked after each run but removed only
// once every target ran, so no target's run follows a mass deletion another target caused; with
// two rounds sshapi and the tar pipe run in ABBA order.
// The targets fail at once here (the API answers 503, ssh finds no server); the order of the
// bench's calls is what is checked.
func TestFilesBenchRemovesCopiesAtTheEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	var calls []string
	var b *FilesBench
	ep := TransferEndpoint{SSH: SSHEndpoint{Host: "127.0.0.1", Port: 1, User: "nobody", KeyFile: "/dev/null", KnownHostsFile: "/dev/null"}}
	b = &FilesBench{
		API: &API{BaseURL: srv.URL, Token: "t"}, Src: ep, Dst: ep, SrcDir: "/src", DstBase: "/dst",
		Files: 1, FileSize: 1, Peers: true, NoSCP: true, Rounds: 2, Report: &FilesReport{},
		Check: func(dir string) error { calls = append(calls, "check "+dir); return nil },
		Remove: func(dir string) error {
			calls = append(calls, fmt.Sprintf("remove %s after %d runs", dir, len(b.Report.Runs)))
			return nil
		},
	}
	if err := b.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range b.Report.Runs {
		order = append(order, fmt.Sprintf("%s %d", r.Target, r.Round))
	}
	if want := []string{"sshapi 1", PeerTarPipe + " 1", PeerTarPipe + " 2", "sshapi 2"}; !slices.Equal(order, want) {
		t.Fatalf("runs %q, want %q", order, want)
	}
	for _, r := range b.Report.Runs {
		if r.Error == "" {
			t.Fatalf("run %s succeeded against nothing", r.Target)
		}
	}
	want := []string{"remove /dst-sshapi after 4 runs", "remove /dst-tar after 4 runs", "remove /dst-tar-2 after 4 runs", "remove /dst-sshapi-2 after 4 runs"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q (failed runs are not checked; every copy removed once all ran)", calls, want)
	}
}

// TestFilesMarkdownRounds: each peer run is compared with sshapi's run of its round, and the line
// under the table with every file and second of both rounds.
func TestFilesMarkdownRounds(t *testing.T) {
	run := func(target string, round int, secs float64) FilesRun {
		return FilesRun{Target: target, Round: round, Files: 1000, FileSize: 4096, Seconds: secs, FilesPerSecond: 1000 / secs, CPUSeconds: 1, SSHDCPUSeconds: 2}
	}
	rep := &FilesReport{Runs: []FilesRun{run(BaselineTarget, 1, 2), run(PeerTarPipe, 1, 1), run(PeerTarPipe, 2, 4), run(BaselineTarget, 2, 2),
		{Target: PeerSCP3R, Round: 1, Files: 1000, FileSize: 4096, Seconds: 8, FilesPerSecond: 125}}}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| " + PeerTarPipe + " | 1 |", "| 0.50× |\n", // round 1: 500 files/s against 1,000
		"| " + PeerTarPipe + " | 2 |", "| 2.00× |\n", // round 2: 500 against 250
		"| " + PeerSCP3R + " | 1 |", "| 4.00× |\n", // once: against round 1's sshapi
		"sshapi 500 files/s (4.00 s in all", PeerTarPipe + " 400 files/s (5.00 s", "sshapi ÷ " + PeerTarPipe + " **1.25×**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "sshapi ÷ "+PeerSCP3R+" **") {
		t.Errorf("a target that ran once has a line of its own:\n%s", md)
	}
}
