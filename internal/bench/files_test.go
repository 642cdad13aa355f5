package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestFilesBenchRemovesCopiesAtTheEnd: the copies are checked after each run but removed only
// once every target ran, so no target's run follows a mass deletion another target caused.
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
		Files: 1, FileSize: 1, Peers: true, NoSCP: true, Report: &FilesReport{},
		Check: func(dir string) error { calls = append(calls, "check "+dir); return nil },
		Remove: func(dir string) error {
			calls = append(calls, fmt.Sprintf("remove %s after %d runs", dir, len(b.Report.Runs)))
			return nil
		},
	}
	if err := b.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(b.Report.Runs) != 2 {
		t.Fatalf("%d runs, want sshapi and the tar pipe", len(b.Report.Runs))
	}
	for _, r := range b.Report.Runs {
		if r.Error == "" {
			t.Fatalf("run %s succeeded against nothing", r.Target)
		}
	}
	want := []string{"remove /dst-sshapi after 2 runs", "remove /dst-tar after 2 runs"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q (failed runs are not checked; every copy removed once all ran)", calls, want)
	}
}
