package study

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/bench"
)

// TestRunListing lists a small directory through both sshapi variants and the OpenSSH peers
// over one multiplexed connection, one and three at a time, and checks that every listing
// succeeded, that CPU was measured and that the section is written.
func TestRunListing(t *testing.T) {
	rep, err := RunListing(t.Context(), ListingOptions{Entries: 30, Concurrency: []int{1, 3}, Listings: 4})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var sshd float64
	for _, r := range rep.Runs {
		got = append(got, r.Target)
		if r.Failed != 0 || r.Error != "" || r.PerSecond <= 0 || r.P50 <= 0 || r.P90 < r.P50 || r.Entries != 30 {
			t.Errorf("run %+v", r)
		}
		if want := max(4, 4*r.Concurrency); r.Listings != want {
			t.Errorf("%s ×%d: %d listings, want %d", r.Target, r.Concurrency, r.Listings, want)
		}
		if r.CPUMs <= 0 {
			t.Errorf("%s ×%d: CPU %.2f ms per listing", r.Target, r.Concurrency, r.CPUMs)
		}
		sshd += r.SSHDCPUMs // a run of a few small listings may stay under one clock tick
	}
	if sshd <= 0 {
		t.Error("no sshd CPU measured in any run")
	}
	targets := []string{bench.BaselineTarget, sshapiSFTPOnly, bench.PeerMuxFind, bench.PeerMuxLsLa}
	if want := strings.Join(append(targets, targets...), ","); strings.Join(got, ",") != want {
		t.Errorf("targets %v, want %s", got, want)
	}
	var doc bytes.Buffer
	if err := ListingSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Listing a large directory", "#### Listing a directory of 30 entries, 3 at a time", "MaxSessions 64", "find -H 'DIR' -mindepth 1"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, doc.String())
		}
	}
}
