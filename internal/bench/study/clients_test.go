package study

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/bench"
)

// TestRunClients asks for the checksum of the 8-byte file, runs `uptime` and lists the 10-entry
// directory with 6 clients through sshapi and the multiplexed OpenSSH peer (the Python peers
// need bench/.venv, which `make paper` has), and checks that every request succeeded, that
// sshapi's checksums and listings were right and that the section is written with its ratios.
func TestRunClients(t *testing.T) {
	rep, err := RunClients(t.Context(), ClientsOptions{Clients: 6, Duration: 300 * time.Millisecond, Rounds: 2, Peers: []string{bench.PeerOpenSSHMux}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Runs {
		got = append(got, fmt.Sprintf("%s/%s/%d", r.Case, r.Target, r.Round))
		s := r.Summary
		if s.Failed != 0 || s.OK == 0 || s.Scheduled != s.OK || s.AchievedRate <= 0 || s.Latency.P50 <= 0 || s.Latency.P99 < s.Latency.P50 || r.Clients != 6 {
			t.Errorf("run %s/%s: %+v", r.Case, r.Target, r)
		}
		if r.CPUMs <= 0 {
			t.Errorf("%s/%s: CPU %.3f ms per request", r.Case, r.Target, r.CPUMs)
		}
	}
	// Two rounds per case, one after the other, in ABBA order.
	if want := "checksum/sshapi/1,checksum/openssh-mux/1,checksum/openssh-mux/2,checksum/sshapi/2," +
		"uptime/sshapi/1,uptime/openssh-mux/1,uptime/openssh-mux/2,uptime/sshapi/2," +
		"ls/sshapi/1,ls/openssh-mux/1,ls/openssh-mux/2,ls/sshapi/2"; strings.Join(got, ",") != want {
		t.Errorf("runs %v, want %s", got, want)
	}
	var doc bytes.Buffer
	if err := ClientsSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Small requests from many clients at once", "#### SHA-256 of an 8-byte file, 6 clients", "#### `uptime`, 6 clients",
		"| sshapi | 1 | `GET …/checksum/{path}?algorithm=sha256` |", "| openssh-mux | 2 | `sha256sum bench-small-", "| openssh-mux | 1 | `uptime` |", "Over 2 rounds each: sshapi ", ": sshapi ÷ openssh-mux **", "105–133 checksums/s", "**not measured here**", "×",
		"#### Listing of a directory of 10 entries, 6 clients", "| sshapi | 2 | `GET …/ls/{path}` |", "| openssh-mux | 1 | `ls -la bench-small-", "107 listings/s"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, doc.String())
		}
	}
}
