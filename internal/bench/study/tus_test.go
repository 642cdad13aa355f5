package study

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sshapi/sshapi/internal/bench"
)

// TestTusSectionAppended: the paper's resumable-upload section is appended to a written
// benchmarks.md after what was there, with its notes and table; an empty report adds nothing.
func TestTusSectionAppended(t *testing.T) {
	tests := []struct {
		name string
		runs []bench.TusRun
		want []string
	}{
		{name: "runs", runs: []bench.TusRun{
			{Path: "loopback", Target: bench.TusCurlPut, MBps: 100},
			{Path: "loopback", Target: bench.TusClient, ChunkBytes: 64 << 20, MBps: 90},
		}, want: []string{"# sweep\n\n## Resumable uploads (tus) beside a plain PUT\n", "- a 256 MiB file", "| loopback | tus (sshapi put) | 64 MiB | 1 | 0 | 90.0 | 90.0–90.0 | 0.90× |"}},
		{name: "no runs", want: []string{"# sweep\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			md := filepath.Join(t.TempDir(), "benchmarks.md")
			if err := os.WriteFile(md, []byte("# sweep\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			rep := &bench.TusReport{Runs: tc.runs}
			rep.Meta.Notes = TusNotes(256 << 20)
			if err := appendSection(md, func(w io.Writer) error { return TusSection(w, rep) }); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(md)
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("benchmarks.md lacks %q:\n%s", w, b)
				}
			}
			if tc.runs == nil && strings.TrimSpace(string(b)) != "# sweep" {
				t.Errorf("an empty report added:\n%s", b)
			}
		})
	}
}
