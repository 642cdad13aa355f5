package shell

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// loginShells are the login shells a remote account may have: sshd runs `shell -c LINE`, so a
// quoted word must stay one literal word in each. Every one is installed by scripts/install-deps.
var loginShells = []struct {
	name string
	// newlines: a word with a newline arrives intact. csh-family shells refuse a newline inside
	// quotes ("Unmatched '."): the command fails as a whole and runs nothing.
	newlines bool
}{
	{"sh", true}, {"bash", true}, {"dash", true}, {"fish", true}, {"tcsh", false},
}

// TestQuoteRoundTrip passes hostile words through real login shells and checks each arrives
// intact as exactly one argument, and that none runs anything.
func TestQuoteRoundTrip(t *testing.T) {
	words := func(pwned string) []string {
		return []string{"", "plain", "a b", "it's", `"dq"`, "`id`", "$(touch " + pwned + ")", "$HOME", "a;b", "new\nline",
			"-n", "*?[x]", "\\", "ünï", "''", "tab\there", "!bang", `\'`, "a'b'c", strings.Repeat("x", 255),
			// fish reads \' and \\ inside single quotes as escapes: a backslash before the quote the
			// quoting closes with ends the word early, and what follows ran as commands.
			`A\';touch ` + pwned + `;#`, `\\`, `a\b`, `x\`,
			// tcsh expands history (!) even inside single quotes and in `tcsh -c`.
			"a!b", "!!", "!#:0", "!#:0:s/printf/touch " + pwned + "/", "{a,b}", "~", "%1", "$x", "(x)"}
	}
	for _, sh := range loginShells {
		t.Run(sh.name, func(t *testing.T) {
			if _, err := exec.LookPath(sh.name); err != nil {
				t.Fatalf("%s is not installed (scripts/install-deps installs it): %v", sh.name, err)
			}
			pwned := filepath.Join(t.TempDir(), "pwned")
			for _, w := range words(pwned) {
				line := "printf '%s\\0' " + Quote(w)
				got, err := exec.Command(sh.name, "-c", line).Output()
				if _, serr := os.Stat(pwned); serr == nil {
					t.Fatalf("%s ran a command from %q", sh.name, w)
				}
				if !sh.newlines && strings.Contains(w, "\n") {
					if err == nil {
						t.Errorf("%s: %q with a newline ran (as %q)", sh.name, w, got)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s %q: %v", sh.name, line, err)
					continue
				}
				if parts := strings.Split(string(got), "\x00"); len(parts) != 2 || parts[0] != w {
					t.Errorf("%s: %q arrived as %q", sh.name, w, got)
				}
			}
		})
	}
}

func TestCommand(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"sha256sum", "--", "it's a file"}, `env LC_ALL=C 'sha256sum' '--' 'it'\''s a file'`},
		{[]string{"tail", `a\b!c`}, `env LC_ALL=C 'tail' 'a'\\'b'\!'c'`},
	} {
		if got := Command(c.argv...); got != c.want {
			t.Errorf("Command(%q) = %s, want %s", c.argv, got, c.want)
		}
	}
}
