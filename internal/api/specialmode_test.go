package api

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSpecialModeBits: the owner sets setuid, setgid and sticky bits as chmod(1) takes them in
// octal (a setgid project directory, 2775, is common on HPC systems), on disk and in the answer;
// a grantee may set the sticky bit but never setuid or setgid, by chmod or with an upload's mode
// (a program the owner's account owns with setuid runs as the owner for whoever executes it),
// and its refused upload leaves nothing behind.
func TestSpecialModeBits(t *testing.T) {
	f := newRaceFixture(t)
	mustMkdir(t, filepath.Join(f.share, "proj"))
	mustWrite(t, filepath.Join(f.share, "tool"), "#!/bin/sh\nid\n")
	ownTree(t, f.srv, f.root)
	onDisk := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode() & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
	}
	for _, tc := range []struct {
		name, user, path, mode string
		status                 int
		want                   os.FileMode // on disk afterwards
	}{
		{"owner: setgid directory", "alice", "proj", "2775", 200, os.ModeSetgid | 0o775},
		{"owner: sticky directory", "alice", "proj", "1777", 200, os.ModeSticky | 0o777},
		{"owner: setuid program", "alice", "tool", "4755", 200, os.ModeSetuid | 0o755},
		{"owner: plain again", "alice", "tool", "0755", 200, 0o755},
		{"grantee: setuid program", "bob", "tool", "4755", 403, 0o755},
		{"grantee: setgid program", "bob", "tool", "2755", 403, 0o755},
		{"grantee: setgid directory", "bob", "proj", "2775", 403, os.ModeSticky | 0o777},
		{"grantee: sticky directory", "bob", "proj", "1770", 200, os.ModeSticky | 0o770},
		{"grantee: plain", "bob", "tool", "0750", 200, 0o750},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := "hpc"
			if tc.user == "bob" {
				sys = "alice:hpc"
			}
			p := filepath.Join(f.share, tc.path)
			r := f.e.do(tc.user, "POST", "/v1/systems/"+sys+"/ops/chmod", map[string]any{"path": p, "mode": tc.mode})
			if r.status != tc.status {
				t.Fatalf("chmod %s: %d %s, want %d", tc.mode, r.status, r.body, tc.status)
			}
			if tc.status == 200 {
				if m := r.json(t); m["mode"] != tc.mode {
					t.Errorf("answer's mode %v, want %s", m["mode"], tc.mode)
				}
			}
			if got := onDisk(p); got != tc.want {
				t.Errorf("on disk %v, want %v", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		user, mode string
		status     int
		want       os.FileMode
	}{
		{"alice", "4750", 201, os.ModeSetuid | 0o750},
		{"bob", "4750", 403, 0},
		{"bob", "0640", 201, 0o640},
	} {
		sys := "hpc"
		if tc.user == "bob" {
			sys = "alice:hpc"
		}
		p := filepath.Join(f.share, "up-"+tc.user+"-"+tc.mode)
		r := f.e.do(tc.user, "PUT", "/v1/systems/"+sys+"/content/"+p[1:]+"?mode="+tc.mode, "#!/bin/sh\n")
		if r.status != tc.status {
			t.Fatalf("%s's upload with mode %s: %d %s, want %d", tc.user, tc.mode, r.status, r.body, tc.status)
		}
		if tc.status != 201 {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("%s's refused upload left %s: %v", tc.user, p, err)
			}
			continue
		}
		if got := onDisk(p); got != tc.want {
			t.Errorf("%s's upload with mode %s: on disk %v, want %v", tc.user, tc.mode, got, tc.want)
		}
	}
	f.intact(t)
}
