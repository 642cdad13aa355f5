package bench

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeFilesAPI answers mkdir and recursive delete like sshapi and records what it was asked;
// mkdir of a path it already made answers 409.
type fakeFilesAPI struct {
	mu      sync.Mutex
	made    map[string]bool
	deletes []string
}

func (f *fakeFilesAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/systems/hpc/ops/mkdir":
		var body struct {
			Path    string `json:"path"`
			Parents bool   `json:"parents"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Parents {
			http.Error(w, "bad mkdir", http.StatusBadRequest)
			return
		}
		if f.made[body.Path] {
			http.Error(w, "exists", http.StatusConflict)
			return
		}
		f.made[body.Path] = true
		_, _ = w.Write([]byte(`{"ok":true,"op":"mkdir"}`))
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/systems/hpc/files/") && r.URL.Query().Get("recursive") == "true":
		f.deletes = append(f.deletes, strings.TrimPrefix(r.URL.Path, "/v1/systems/hpc/files"))
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusTeapot)
	}
}

// TestOpenRunDir opens run directories for benches sharing one remote directory and checks that
// each gets its own, directly under the shared one, and that cleanup deletes exactly that
// directory.
func TestOpenRunDir(t *testing.T) {
	for _, tc := range []struct {
		remoteDir, parent string
	}{{"/tmp", "/tmp/"}, {"/scratch/me/", "/scratch/me/"}, {"/", "/"}} {
		t.Run(tc.remoteDir, func(t *testing.T) {
			fake := &fakeFilesAPI{made: map[string]bool{}}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			api := &API{BaseURL: srv.URL, Token: "t"}
			a := &TransferBench{API: api, Src: TransferEndpoint{System: "hpc"}, RemoteDir: tc.remoteDir}
			b := &TransferBench{API: api, Src: TransferEndpoint{System: "hpc"}, RemoteDir: tc.remoteDir}
			closeA, err := a.OpenRunDir(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			closeB, err := b.OpenRunDir(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if a.RemoteDir == b.RemoteDir {
				t.Fatalf("both runs got %s", a.RemoteDir)
			}
			for _, d := range []string{a.RemoteDir, b.RemoteDir} {
				rest, ok := strings.CutPrefix(d, tc.parent)
				if !ok || !strings.HasPrefix(rest, "sshapi-bench-") || strings.Contains(rest, "/") {
					t.Errorf("run dir %q: want %ssshapi-bench-<pid>-<random>", d, tc.parent)
				}
			}
			if got := a.remote("bench-src.bin"); got != a.RemoteDir+"/bench-src.bin" {
				t.Errorf("source file %s is not in the run dir", got)
			}
			if err := closeA(t.Context()); err != nil {
				t.Fatal(err)
			}
			if len(fake.deletes) != 1 || fake.deletes[0] != a.RemoteDir {
				t.Fatalf("cleanup of the first run deleted %q, want only %s", fake.deletes, a.RemoteDir)
			}
			if err := closeB(t.Context()); err != nil {
				t.Fatal(err)
			}
			if len(fake.deletes) != 2 || fake.deletes[1] != b.RemoteDir {
				t.Fatalf("cleanup deleted %q, want %s then %s", fake.deletes, a.RemoteDir, b.RemoteDir)
			}
		})
	}
}

// TestOpenRunDirFails checks that a run dir that cannot be made (relative remote dir, or mkdir
// refused) leaves RemoteDir alone and deletes nothing.
func TestOpenRunDirFails(t *testing.T) {
	for _, tc := range []struct{ name, remoteDir, system string }{
		{"relative", "tmp", "hpc"}, {"empty", "", "hpc"}, {"mkdir refused", "/tmp", "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeFilesAPI{made: map[string]bool{}}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			b := &TransferBench{API: &API{BaseURL: srv.URL, Token: "t"}, Src: TransferEndpoint{System: tc.system}, RemoteDir: tc.remoteDir}
			if _, err := b.OpenRunDir(t.Context()); err == nil {
				t.Fatal("want an error")
			}
			if b.RemoteDir != tc.remoteDir || len(fake.deletes) != 0 {
				t.Errorf("RemoteDir %q (want %q), deletes %v", b.RemoteDir, tc.remoteDir, fake.deletes)
			}
		})
	}
}

func TestRunDirName(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n := RunDirName("bench-transfer")
		if seen[n] || !strings.HasPrefix(n, "bench-transfer-") || strings.ContainsAny(n, "/ ") {
			t.Fatalf("name %q (seen before: %v)", n, seen[n])
		}
		seen[n] = true
	}
}
