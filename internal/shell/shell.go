// Package shell builds command lines for a remote POSIX login shell in which every argument
// stays one literal word, whatever bytes it holds. It is the only place sshapi quotes for a
// shell.
package shell

import "strings"

// Quote quotes s as one word for a POSIX shell: it is wrapped in single quotes and each single
// quote inside is written as quote, backslash, quote, quote (close, escaped quote, reopen).
// Nothing inside single quotes is special to sh, bash, dash, ksh or zsh.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Command quotes every word of argv and prefixes `env LC_ALL=C`, so that error messages are in
// English for classification (and `env` works from csh-family login shells too).
func Command(argv ...string) string {
	var b strings.Builder
	b.WriteString("env LC_ALL=C")
	for _, a := range argv {
		b.WriteByte(' ')
		b.WriteString(Quote(a))
	}
	return b.String()
}
