package files

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestUploadCreateOneRoundTrip: an upload's temporary file is created owner-only by its open (the
// SSH_FXP_OPEN carries mode 0600), and the fchmod that makes sure of that mode on any server is
// sent before the data but not waited for: the relay holds the fchmod's reply until a WRITE was
// sent, so an upload that awaited it before writing would stall. One round trip before the
// first byte instead of two.
func TestUploadCreateOneRoundTrip(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "up.bin")
	var wrote, chmodded bool // the gate's matchers see every request in order, one at a time
	g := &pairGate{t: t, giveUp: 5 * time.Second, perms: map[string]uint32{}, want: [2]func(byte, string) bool{
		func(typ byte, _ string) bool {
			first := typ == fxpFsetstat && !wrote && !chmodded
			chmodded = chmodded || first
			return first
		},
		func(typ byte, _ string) bool {
			first := typ == fxpWrite && !wrote
			wrote = wrote || typ == fxpWrite
			return first
		},
	}}
	c, requests := gatedSFTP(t, g)
	data := make([]byte, 1<<20+3)
	_, _ = rand.Read(data)
	if _, err := New(c, noRunner{t}, Options{}).Upload(t.Context(), dst, bytes.NewReader(data), UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = requests()
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("uploaded file differs (%v)", err)
	}
	if !chmodded {
		t.Error("no fchmod went out before the first write")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	created := false
	for name, perm := range g.perms {
		if IsTempName(filepath.Base(name)) {
			created = true
			if perm&0o7777 != 0o600 {
				t.Errorf("%s opened with permissions %o, want 600", name, perm&0o7777)
			}
		}
	}
	if !created {
		t.Error("the temporary file's open carried no permissions")
	}
	assertNoTemps(t, dir)
}
