package study

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCellCiphers runs the paper's per-cipher cell alone on loopback, with a file of
// $SSHAPI_CELL_CIPHERS MiB (skipped without it), $SSHAPI_CELL_CIPHER_LIST (comma-separated; the
// paper's ciphers by default), $SSHAPI_CELL_RTT and $SSHAPI_CELL_RATE (bytes/s) for an emulated
// path instead, and $SSHAPI_CELL_PROFILES a directory for a CPU profile per sshapi run, and
// prints its section:
//
//	SSHAPI_CELL_CIPHERS=256 SSHAPI_CELL_PROFILES=/tmp/prof go test -run TestCellCiphers -v -timeout 30m ./internal/bench/study
func TestCellCiphers(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("SSHAPI_CELL_CIPHERS"))
	if mib <= 0 {
		t.Skip("set SSHAPI_CELL_CIPHERS to a file size in MiB to run the cell")
	}
	settleMax = 20 * time.Second
	ciphers := PaperCiphers
	if l := os.Getenv("SSHAPI_CELL_CIPHER_LIST"); l != "" {
		ciphers = strings.Split(l, ",")
	}
	o := PaperCipherOptions(int64(mib)<<20, ciphers, os.Stderr)
	o.Paths = []TransferPath{{}}
	if d, err := time.ParseDuration(os.Getenv("SSHAPI_CELL_RTT")); err == nil {
		rate, _ := strconv.ParseInt(os.Getenv("SSHAPI_CELL_RATE"), 10, 64)
		o.Paths = []TransferPath{{RTT: d, Rate: rate}}
	}
	if dir := os.Getenv("SSHAPI_CELL_PROFILES"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		o.Profiles = dir
	}
	rep, err := RunTransfer(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	var doc strings.Builder
	if err := CipherSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + doc.String())
	if o.Profiles != "" {
		profs, _ := filepath.Glob(filepath.Join(o.Profiles, "*.pprof"))
		if want := 3 * len(ciphers); len(profs) < want { // upload, upload with digest=none, download
			t.Errorf("%d profiles in %s, want %d (one per sshapi run): %v", len(profs), o.Profiles, want, profs)
		}
	}
	for _, r := range rep.Runs {
		if r.Error != "" {
			t.Errorf("%s %s %s: %s", r.Scenario, r.Cipher, r.Target, r.Error)
		}
	}
}
