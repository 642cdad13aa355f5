package study

import (
	"bytes"
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
	rep, err := RunClients(t.Context(), ClientsOptions{Clients: 6, Duration: 500 * time.Millisecond, Peers: []string{bench.PeerOpenSSHMux}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Runs {
		got = append(got, r.Case+"/"+r.Target)
		s := r.Summary
		if s.Failed != 0 || s.OK == 0 || s.Scheduled != s.OK || s.AchievedRate <= 0 || s.Latency.P50 <= 0 || s.Latency.P99 < s.Latency.P50 || r.Clients != 6 {
			t.Errorf("run %s/%s: %+v", r.Case, r.Target, r)
		}
		if r.CPUMs <= 0 {
			t.Errorf("%s/%s: CPU %.3f ms per request", r.Case, r.Target, r.CPUMs)
		}
	}
	if want := "checksum/sshapi,checksum/openssh-mux,uptime/sshapi,uptime/openssh-mux,ls/sshapi,ls/openssh-mux"; strings.Join(got, ",") != want {
		t.Errorf("runs %v, want %s", got, want)
	}
	var doc bytes.Buffer
	if err := ClientsSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Small requests from many clients at once", "#### SHA-256 of an 8-byte file, 6 clients", "#### `uptime`, 6 clients",
		"| sshapi | `GET …/checksum/{path}?algorithm=sha256` |", "| openssh-mux | `sha256sum bench-small-", "| openssh-mux | `uptime` |", "105–133 checksums/s", "**not measured here**", "×",
		"#### Listing of a directory of 10 entries, 6 clients", "| sshapi | `GET …/ls/{path}` |", "| openssh-mux | `ls -la bench-small-", "107 listings/s"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, doc.String())
		}
	}
}
