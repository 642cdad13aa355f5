package shell

import (
	"os/exec"
	"strings"
	"testing"
)

// TestQuoteRoundTrip passes hostile words through a real sh and checks each arrives intact as
// exactly one argument.
func TestQuoteRoundTrip(t *testing.T) {
	words := []string{"", "plain", "a b", "it's", `"dq"`, "`id`", "$(touch /tmp/shell-test-pwned)", "$HOME", "a;b", "new\nline",
		"-n", "*?[x]", "\\", "ünï", "''", "tab\there", "!bang", `\'`, "a'b'c", strings.Repeat("x", 255)}
	for _, sh := range []string{"sh", "bash"} {
		if _, err := exec.LookPath(sh); err != nil {
			continue
		}
		for _, w := range words {
			line := "printf '%s\\0' " + Quote(w)
			got, err := exec.Command(sh, "-c", line).Output()
			if err != nil {
				t.Fatalf("%s %q: %v", sh, line, err)
			}
			if parts := strings.Split(string(got), "\x00"); len(parts) != 2 || parts[0] != w {
				t.Errorf("%s: %q arrived as %q", sh, w, got)
			}
		}
	}
}

func TestCommand(t *testing.T) {
	got := Command("sha256sum", "--", "it's a file")
	if want := `env LC_ALL=C 'sha256sum' '--' 'it'\''s a file'`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
