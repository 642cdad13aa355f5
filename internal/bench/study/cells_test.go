package study

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCellFiles runs the paper's many-small-files cell alone, with $SSHAPI_CELL_FILES files of
// 4 KiB beside the tar pipe (skipped without it; SSHAPI_CELL_COMPARE=no leaves the OpenSSH
// targets out, SSHAPI_CELL_SCP=no only scp -3 -r, SSHAPI_CELL_ROUNDS sets the rounds of sshapi
// and the tar pipe, 2 by default), and prints its section. SSHAPI_CELL_PROFILE
// names a file for a CPU profile of sshapi's run alone; -cpuprofile profiles the whole bench
// process, which hosts sshapi:
//
//	SSHAPI_CELL_FILES=20000 go test -run TestCellFiles -v -timeout 30m -cpuprofile files.pprof ./internal/bench/study
func TestCellFiles(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SSHAPI_CELL_FILES"))
	if n <= 0 {
		t.Skip("set SSHAPI_CELL_FILES to a file count to run the cell")
	}
	settleMax = 20 * time.Second
	o := PaperFilesOptions(n, os.Stderr)
	o.Compare = os.Getenv("SSHAPI_CELL_COMPARE") != "no"
	o.NoSCP = os.Getenv("SSHAPI_CELL_SCP") == "no"
	o.Profile = os.Getenv("SSHAPI_CELL_PROFILE")
	if v, err := strconv.Atoi(os.Getenv("SSHAPI_CELL_ROUNDS")); err == nil {
		o.Rounds = v
	}
	rep, err := RunFiles(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	var doc strings.Builder
	if err := FilesSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + doc.String())
}

// TestCellClients runs the paper's small-requests cell alone (checksum of an 8-byte file,
// uptime and a 10-entry ls) with $SSHAPI_CELL_CLIENTS clients (skipped without it), and prints
// its section. SSHAPI_CELL_CASES picks cases (comma-separated), SSHAPI_CELL_PEERS adds peers
// (e.g. asyncssh, with make bench-deps; none by default), SSHAPI_CELL_ROUNDS runs every target
// that many times in ABBA order, SSHAPI_CELL_PROFILES names a directory for a CPU profile of each
// sshapi run:
//
//	SSHAPI_CELL_CLIENTS=50 SSHAPI_CELL_CASES=uptime SSHAPI_CELL_PEERS=asyncssh \
//	  go test -run TestCellClients -v ./internal/bench/study
func TestCellClients(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SSHAPI_CELL_CLIENTS"))
	if n <= 0 {
		t.Skip("set SSHAPI_CELL_CLIENTS to a client count to run the cell")
	}
	settleMax = 20 * time.Second
	rounds, _ := strconv.Atoi(os.Getenv("SSHAPI_CELL_ROUNDS"))
	o := ClientsOptions{Clients: n, Rounds: rounds, Peers: []string{}, Progress: os.Stderr, Profiles: os.Getenv("SSHAPI_CELL_PROFILES")}
	if v := os.Getenv("SSHAPI_CELL_CASES"); v != "" {
		o.Cases = strings.Split(v, ",")
	}
	if v := os.Getenv("SSHAPI_CELL_PEERS"); v != "" {
		o.Peers = strings.Split(v, ",")
		o.Python = "../../../bench/.venv/bin/python"
		o.PeersDir = "../../../bench/peers"
	}
	rep, err := RunClients(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	var doc strings.Builder
	if err := ClientsSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + doc.String())
}
