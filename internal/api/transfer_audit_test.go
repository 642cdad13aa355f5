package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestTransferAuditsEveryOwner: bob copies from alice's system (a read grant) to carol's (a
// write grant). Each owner's audit has the transfer, on her own system and with only her own
// path; bob's has both entries. Before, the one entry named the destination only, so alice
// never saw her files copied out, and carol saw alice's path.
func TestTransferAuditsEveryOwner(t *testing.T) {
	e, _ := newTransferEnv(t)
	e.register("alice", "src")
	e.register("carol", "dst")
	srcDir, dstDir := e.srv.MkTemp(t), e.srv.MkTemp(t)
	if err := os.WriteFile(filepath.Join(srcDir, "f"), []byte("alice's data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ownTree(t, e.srv, srcDir)
	ownTree(t, e.srv, dstDir)
	for _, g := range []struct{ owner, system, path, access string }{
		{"alice", "src", srcDir, "read"}, {"carol", "dst", dstDir, "write"},
	} {
		if r := e.do(g.owner, "POST", "/v1/systems/"+g.system+"/grants", map[string]any{"principal": "user:bob", "path": g.path, "access": g.access}); r.status != 201 {
			t.Fatalf("%s's grant: %d %s", g.owner, r.status, r.body)
		}
	}
	srcPath, dstPath := filepath.Join(srcDir, "f"), filepath.Join(dstDir, "f")
	r := e.do("bob", "POST", "/v1/transfers", map[string]any{
		"source": map[string]any{"system": "alice:src", "path": srcPath}, "destination": map[string]any{"system": "carol:dst", "path": dstPath},
	})
	if r.status != 202 {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	if m := e.waitTransfer("bob", r.json(t)["id"].(string), time.Minute); m["status"] != "succeeded" {
		t.Fatalf("transfer: %v", m)
	}
	type entry struct {
		Principal, Owner, Action, System string
		Paths                            []string
	}
	transfersIn := func(user string) []entry {
		var audit struct{ Entries []entry }
		if err := json.Unmarshal(e.do(user, "GET", "/v1/audit?limit=100", nil).body, &audit); err != nil {
			t.Fatal(err)
		}
		var out []entry
		for _, x := range audit.Entries {
			if x.Action == "POST /v1/transfers" {
				out = append(out, x)
			}
		}
		return out
	}
	for _, want := range []struct {
		user, system, path, other string
	}{{"alice", "src", srcPath, dstPath}, {"carol", "dst", dstPath, srcPath}} {
		got := transfersIn(want.user)
		if len(got) != 1 || got[0].Principal != "bob" || got[0].Owner != want.user || got[0].System != want.system ||
			!slices.Contains(got[0].Paths, want.path) || slices.Contains(got[0].Paths, want.other) {
			t.Errorf("%s's audit of bob's transfer: %+v, want one entry by bob on %s with %s only", want.user, got, want.system, want.path)
		}
	}
	if got := transfersIn("bob"); len(got) != 2 {
		t.Errorf("bob's audit of his transfer: %+v, want an entry per owner", got)
	}
}
