package transfer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sshapi/sshapi/internal/sshtest"
)

// boundsTree makes a source directory of n small files owned by a's user.
func boundsTree(t *testing.T, a *sshtest.Server, n int) string {
	t.Helper()
	root := filepath.Join(a.MkTemp(t), "tree")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	owned(t, a, root)
	for i := range n {
		p := filepath.Join(root, fmt.Sprintf("file-%03d", i))
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
		owned(t, a, p)
	}
	return root
}

// TestPlanAndHelperOutputBounded: a source tree with more items, or more bytes of paths, than
// the plan may hold fails the transfer naming the limit, with nothing copied; a helper command
// (the sha256 batch of the verification) printing more than transfer.helper_output_bytes fails
// the transfer naming that limit, instead of its cut output being parsed.
func TestPlanAndHelperOutputBounded(t *testing.T) {
	a, b := sshtest.New(t, sshtest.Options{}), sshtest.New(t, sshtest.Options{})
	root := boundsTree(t, a, 10)
	cases := []struct {
		name  string
		set   func(*Config)
		limit string
	}{
		{"items", func(c *Config) { c.MaxPlanItems = 5 }, "transfer.max_plan_items"},
		{"path bytes", func(c *Config) { c.MaxPlanPathBytes = 4 * int64(len(root)) }, "transfer.max_plan_path_bytes"},
		{"helper output", func(c *Config) { c.HelperOutputBytes = 200 }, "transfer.helper_output_bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			c.set(&cfg)
			h := newHarness(t, cfg)
			h.sys.add("alice", "a", a, "")
			h.sys.add("alice", "b", b, "")
			dst := filepath.Join(b.MkTemp(t), "copy")
			tr := h.submit("alice", Request{Source: Endpoint{System: "a", Path: root},
				Destination: Endpoint{System: "b", Path: dst}, Recursive: true, Streams: 1})
			tr = h.wait("alice", tr.ID, time.Minute, nil)
			if tr.Status != StatusFailed || !strings.Contains(tr.Error, c.limit) {
				t.Fatalf("status %s error %q, want failed naming %s", tr.Status, tr.Error, c.limit)
			}
			if c.name != "helper output" {
				if _, err := os.Stat(dst); !os.IsNotExist(err) {
					t.Fatalf("a plan over its limit created the destination: %v", err)
				}
			}
			if left := temps(t, filepath.Dir(dst)); len(left) > 0 {
				t.Fatalf("temporary files left: %v", left)
			}
			t.Logf("%s", tr.Error)
		})
	}
}
