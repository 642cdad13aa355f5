package api

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/store/sqlite"
)

// TestTusFinishByNameNotFollowed: the one resumable upload finished by name, in a request of its
// own, is a zero-length one whose first finish lost its SSH connection (the part file and the
// upload stay for the client to send its empty PATCH again). Between the two requests bob, a
// write grantee, moves alice's link to victim/v00 (outside the grant) onto the part file's name.
// The finish must not truncate or chmod what the link points to.
func TestTusFinishByNameNotFollowed(t *testing.T) {
	f := newRaceFixture(t)
	victim := filepath.Join(f.victim, "v00")
	f.ownerLink(t, victim, filepath.Join(f.share, "stage", "v00"))
	ownTree(t, f.srv, f.root)
	loc := tusCreate(t, f.e, "bob", "alice:hpc", filepath.Join(f.share, "empty.txt"), 1)
	// What a zero-length upload whose finish lost its connection leaves: its row, offset 0 of
	// length 0, and its empty part file.
	db := f.e.api.deps.Store.(*sqlite.DB).SQL()
	if _, err := db.ExecContext(t.Context(), "UPDATE uploads SET length = 0"); err != nil {
		t.Fatal(err)
	}
	var part string
	if err := db.QueryRowContext(t.Context(), "SELECT part_name FROM uploads").Scan(&part); err != nil {
		t.Fatal(err)
	}
	if r := f.e.do("bob", "GET", f.url("ls", f.share)+"?show_hidden=true", nil); !strings.Contains(string(r.body), part) {
		t.Fatalf("bob's listing does not show the part file %s: %d %s", part, r.status, r.body)
	}
	if r := f.e.do("bob", "POST", "/v1/systems/alice:hpc/ops/move", map[string]any{"source": filepath.Join(f.share, "stage", "v00"),
		"destination": filepath.Join(f.share, part), "overwrite": true}); r.status != 200 {
		t.Fatalf("bob's move onto the part file: %d %s", r.status, r.body)
	}
	if err := os.Chmod(victim, 0o600); err != nil { // so a chmod through the link shows too
		t.Fatal(err)
	}
	r := tusPatch(t, f.e, f.e.url, "bob", loc, 0, nil)
	b, err := os.ReadFile(victim)
	fi, _ := os.Stat(victim)
	if err != nil || !bytes.Equal(b, []byte(victimMark)) || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the finish (%d %s) went through the link: victim/v00 now %q (%v), mode %v", r.status, r.body, b, err, fi.Mode())
	}
	if r.status == 204 {
		if fi, err := os.Lstat(filepath.Join(f.share, "empty.txt")); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			t.Fatalf("the finish renamed alice's link into place")
		}
	}
	t.Logf("the finish answered %d %s", r.status, r.body)
}
