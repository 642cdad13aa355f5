package study

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCellFiles runs the paper's many-small-files cell alone, with $SSHAPI_CELL_FILES files of
// 4 KiB beside the tar pipe (skipped without it), and prints its section. With -cpuprofile it
// profiles the bench process, which hosts sshapi:
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

// TestCellClients runs the paper's small-requests cell alone (checksum of an 8-byte file and
// uptime) with $SSHAPI_CELL_CLIENTS clients and no peer (skipped without it), and prints its
// section:
//
//	SSHAPI_CELL_CLIENTS=50 go test -run TestCellClients -v ./internal/bench/study
func TestCellClients(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SSHAPI_CELL_CLIENTS"))
	if n <= 0 {
		t.Skip("set SSHAPI_CELL_CLIENTS to a client count to run the cell")
	}
	settleMax = 20 * time.Second
	rep, err := RunClients(t.Context(), ClientsOptions{Clients: n, Peers: []string{}, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	var doc strings.Builder
	if err := ClientsSection(&doc, rep); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + doc.String())
}
